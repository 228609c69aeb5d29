package plugin_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kplug/kplug/imagecred/plugin"
)

func TestTokenExchange(t *testing.T) {
	var got url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		got = r.PostForm
		if r.PostForm.Get("subject_token") != "sa-token" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"token rejected"}`))
			return
		}
		_, _ = w.Write([]byte(`{"access_token":"registry-token","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":600}`))
	}))
	defer srv.Close()
	f, err := plugin.TokenExchange(plugin.TokenExchangeOptions{Endpoint: srv.URL, Audience: "registry", Scope: "pull", Username: "oauth2"})
	if err != nil {
		t.Fatal(err)
	}

	resp, err := f(t.Context(), &plugin.Request{Image: "registry.io:5000/team/app", ServiceAccountToken: "sa-token"})
	if err != nil {
		t.Fatal(err)
	}
	d := 540 * time.Second
	want := &plugin.Response{CacheKeyType: plugin.CacheRegistry, CacheDuration: &d,
		Auth: map[string]plugin.AuthConfig{"registry.io:5000": {Username: "oauth2", Password: "registry-token"}}}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	wantForm := url.Values{
		"grant_type":           {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token":        {"sa-token"},
		"subject_token_type":   {"urn:ietf:params:oauth:token-type:jwt"},
		"requested_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"audience":             {"registry"},
		"scope":                {"pull"},
	}
	if diff := cmp.Diff(wantForm, got); diff != "" {
		t.Errorf("exchange request (-want +got):\n%s", diff)
	}

	_, err = f(t.Context(), &plugin.Request{Image: "registry.io/app", ServiceAccountToken: "other"})
	if want := "token-exchange: " + srv.URL + " refused the exchange: invalid_grant: token rejected"; err == nil || err.Error() != want {
		t.Errorf("refused exchange: %v, want %s", err, want)
	}
	_, err = f(t.Context(), &plugin.Request{Image: "registry.io/app"})
	if err == nil || !strings.Contains(err.Error(), "configure tokenAttributes") {
		t.Errorf("request without a token: %v", err)
	}
}

// Issue 12 suspicion (confirmed): the token-exchange plugin followed redirects, so a 307 resent the service-account token elsewhere, and accepted http:// endpoints.
func TestSecurityTokenExchangeSendsTheTokenOnlyToTheEndpoint(t *testing.T) {
	req := &plugin.Request{Image: "registry.io/app", ServiceAccountToken: "sa-token"}
	t.Run("redirects are refused", func(t *testing.T) {
		elsewhere := make(chan string, 4)
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			elsewhere <- r.FormValue("subject_token")
			_, _ = w.Write([]byte(`{"access_token":"stolen"}`))
		}))
		defer other.Close()
		for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound} {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other.URL+"/token?secret=x", code)
			}))
			f, err := plugin.TokenExchange(plugin.TokenExchangeOptions{Endpoint: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			_, err = f(t.Context(), req)
			srv.Close()
			want := fmt.Sprintf("token-exchange: %s answered %d %s, a redirect to %q; redirects are not followed", srv.URL, code, http.StatusText(code), other.URL+"/token")
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("%d: error %v, want %s...", code, err, want)
			}
		}
		// A client of the caller's that follows redirects does not change that.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
		}))
		defer srv.Close()
		f, err := plugin.TokenExchange(plugin.TokenExchangeOptions{Endpoint: srv.URL, Client: &http.Client{}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f(t.Context(), req); err == nil {
			t.Error("a redirect was followed with the caller's client")
		}
		close(elsewhere)
		for token := range elsewhere {
			t.Errorf("the redirect target received the subject token %q", token)
		}
	})
	t.Run("only https, or http to loopback", func(t *testing.T) {
		for endpoint, wantErr := range map[string]string{
			"http://sts.example/token":          `token-exchange: endpoint "http://sts.example/token" is not an https URL; the exchange sends the service-account token, so it must use https`,
			"http://user:pw@10.0.0.1/token":     `token-exchange: endpoint "http://user:xxxxx@10.0.0.1/token" is not an https URL`,
			"http://localhost:8080/token":       `token-exchange: endpoint "http://localhost:8080/token" is not an https URL`,
			"ftp://sts.example/token":           `token-exchange: endpoint "ftp://sts.example/token" is not an https URL`,
			"sts.example/token":                 `token-exchange: invalid endpoint "sts.example/token": want an https URL such as https://sts.example/token`,
			"":                                  `token-exchange: invalid endpoint "": want an https URL`,
			"https://sts.example/token":         "",
			"http://127.0.0.1:8080/token":       "",
			"http://[::1]:8080/token":           "",
			"https://sts.example:8443/v1/token": "",
		} {
			f, err := plugin.TokenExchange(plugin.TokenExchangeOptions{Endpoint: endpoint})
			switch {
			case wantErr == "" && err != nil:
				t.Errorf("%q: %v", endpoint, err)
			case wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), wantErr)):
				t.Errorf("%q: error %v, want %s...", endpoint, err, wantErr)
			case wantErr != "" && f != nil:
				t.Errorf("%q: a plugin was returned with the error", endpoint)
			}
		}
	})
}

// FuzzTokenExchangeResponse feeds the plugin any answer from the token endpoint: it must
// not panic, must not put the subject token in an error, and must answer only with an
// access token and a cache duration that is not negative.
func FuzzTokenExchangeResponse(f *testing.F) {
	f.Add(200, `{"access_token":"at","token_type":"Bearer","expires_in":600}`, "")
	f.Add(200, `{"access_token":"at","expires_in":-5}`, "")
	f.Add(200, `{"access_token":""}`, "")
	f.Add(400, `{"error":"invalid_grant","error_description":"token rejected"}`, "")
	f.Add(307, "", "https://elsewhere.example/token?secret=1")
	f.Add(308, "", "%zz")
	f.Add(500, "<html>", "")
	const subject = "subject-token-3f9a"
	f.Fuzz(func(t *testing.T, status int, body, location string) {
		if status < 100 || status > 999 || strings.Contains(body+location, subject) {
			return
		}
		client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			h := http.Header{}
			if location != "" {
				h.Set("Location", location)
			}
			return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d Status", status), Header: h,
				Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
		})}
		plug, err := plugin.TokenExchange(plugin.TokenExchangeOptions{Endpoint: "https://sts.example/token", Client: client})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := plug(t.Context(), &plugin.Request{Image: "registry.io/app", ServiceAccountToken: subject})
		if err != nil {
			if strings.Contains(err.Error(), subject) {
				t.Fatalf("the error shows the subject token: %v", err)
			}
			return
		}
		if a := resp.Auth["registry.io"]; a.Password == "" || len(resp.Auth) != 1 {
			t.Fatalf("answer without an access token: %+v", resp)
		}
		if resp.CacheDuration != nil && *resp.CacheDuration < 0 {
			t.Fatalf("negative cache duration %v", *resp.CacheDuration)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
