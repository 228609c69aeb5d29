package plugin_test

import (
	"context"
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
	f := plugin.TokenExchange(plugin.TokenExchangeOptions{Endpoint: srv.URL, Audience: "registry", Scope: "pull", Username: "oauth2"})

	resp, err := f(context.Background(), &plugin.Request{Image: "registry.io:5000/team/app", ServiceAccountToken: "sa-token"})
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

	_, err = f(context.Background(), &plugin.Request{Image: "registry.io/app", ServiceAccountToken: "other"})
	if want := "token-exchange: " + srv.URL + " refused the exchange: invalid_grant: token rejected"; err == nil || err.Error() != want {
		t.Errorf("refused exchange: %v, want %s", err, want)
	}
	_, err = f(context.Background(), &plugin.Request{Image: "registry.io/app"})
	if err == nil || !strings.Contains(err.Error(), "configure tokenAttributes") {
		t.Errorf("request without a token: %v", err)
	}
}
