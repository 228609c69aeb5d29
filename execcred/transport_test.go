package execcred

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

// authServer accepts only the current token and echoes the request body.
type authServer struct {
	*httptest.Server
	valid atomic.Value // string
	hits  atomic.Int32
}

func newAuthServer(t *testing.T, valid string) *authServer {
	s := &authServer{}
	s.valid.Store(valid)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if r.Header.Get("Authorization") != "Bearer "+s.valid.Load().(string) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kplug-test"`)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(append([]byte("ok:"), body...))
	}))
	t.Cleanup(s.Close)
	return s
}

func do(t *testing.T, rt http.RoundTripper, req *http.Request) (int, string) {
	t.Helper()
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestTransportAddsTokenWithoutMutatingRequest(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Stdout(tokenOutput(V1, "good", time.Time{}))
	srv := newAuthServer(t, "good")
	rt := &Transport{Source: newSource(t, fakeConfig(f, V1), Options{})}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	if code, _ := do(t, rt, req); code != 200 {
		t.Fatalf("status %d", code)
	}
	if got := req.Header.Get("Authorization"); got != "" {
		t.Errorf("the caller's request was modified: Authorization %q", got)
	}
}

func TestExistingAuthorizationHeaderWins(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Stdout(tokenOutput(V1, "from-plugin", time.Time{}))
	srv := newAuthServer(t, "static")
	rt := &Transport{Source: newSource(t, fakeConfig(f, V1), Options{})}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	req.Header.Set("Authorization", "Bearer static")
	if code, _ := do(t, rt, req); code != 200 {
		t.Errorf("status %d", code)
	}
	if f.Runs() != 0 {
		t.Errorf("plugin ran %d times for a request that had its own Authorization", f.Runs())
	}
}

func TestUnauthorizedRefreshesAndRetries(t *testing.T) {
	t.Parallel()
	for _, retry := range []bool{false, true} {
		f := exectest.New(t).Stdout(tokenOutput(V1, "old", time.Time{}))
		srv := newAuthServer(t, "old")
		rt := &Transport{Source: newSource(t, fakeConfig(f, V1), Options{}), RetryAfterRefresh: retry}
		post := func() *http.Request {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader("payload"))
			return req
		}
		if code, _ := do(t, rt, post()); code != 200 {
			t.Fatalf("first request: %d", code)
		}
		// The server rotates its accepted token; the plugin now hands out the new one.
		srv.valid.Store("new")
		f.Stdout(tokenOutput(V1, "new", time.Time{}))
		code, body := do(t, rt, post())
		if retry {
			if code != 200 || body != "ok:payload" {
				t.Errorf("with retry: %d %q, want 200 and the replayed body", code, body)
			}
		} else if code != 401 {
			t.Errorf("without retry: %d, want the 401 returned as client-go does", code)
		}
		if code, _ := do(t, rt, post()); code != 200 {
			t.Errorf("retry=%v: the request after the refresh got %d", retry, code)
		}
		if f.Runs() != 2 {
			t.Errorf("retry=%v: %d plugin runs, want 2", retry, f.Runs())
		}
	}
}

func TestUnreplayableBodyIsNotRetried(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Stdout(tokenOutput(V1, "old", time.Time{}))
	srv := newAuthServer(t, "new")
	src := newSource(t, fakeConfig(f, V1), Options{})
	mustCred(t, src) // "old" is cached
	rt := &Transport{Source: src, RetryAfterRefresh: true}
	f.Stdout(tokenOutput(V1, "new", time.Time{}))
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, io.NopCloser(strings.NewReader("once")))
	if code, _ := do(t, rt, req); code != 401 {
		t.Errorf("status %d, want the 401: a body without GetBody cannot be sent twice", code)
	}
	if srv.hits.Load() != 1 {
		t.Errorf("server saw %d requests, want 1", srv.hits.Load())
	}
}

func TestConnectionsClosedOnCertificateRotationOnly(t *testing.T) {
	t.Parallel()
	certA, keyA := clientCert(t)
	certB, keyB := clientCert(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.RemoteAddr)
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()

	f := exectest.New(t)
	certOutput := func(cert, key, token string) {
		f.Stdout(`{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":` + strconv.Quote(token) +
			`,"clientCertificateData":` + strconv.Quote(cert) + `,"clientKeyData":` + strconv.Quote(key) + `}}`)
	}
	certOutput(certA, keyA, "t1")
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	src := newSource(t, fakeConfig(f, V1), Options{Metrics: m})
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	base := &http.Transport{MaxConnsPerHost: 1}
	defer base.CloseIdleConnections()
	rt := &Transport{Source: src, Base: base}
	base.TLSClientConfig = &tls.Config{RootCAs: roots, GetClientCertificate: rt.GetClientCertificate, MinVersion: tls.VersionTLS12}
	base.DialContext = rt.DialContext(nil)
	remote := func() string {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
		_, body := do(t, rt, req)
		return body
	}
	first := remote()
	if again := remote(); again != first {
		t.Fatalf("no connection reuse to begin with: %s then %s", first, again)
	}

	// A new token with the same certificate keeps the connection.
	certOutput(certA, keyA, "t2")
	if _, err := src.Credential(t.Context(), &Rejection{Credential: mustCred(t, src), Response: &Response{Code: 401}}); err != nil {
		t.Fatal(err)
	}
	if got := remote(); got != first {
		t.Errorf("token rotation changed the connection: %s then %s", first, got)
	}

	// A new certificate closes it.
	certOutput(certB, keyB, "t3")
	if _, err := src.Credential(t.Context(), &Rejection{Credential: mustCred(t, src), Response: &Response{Code: 401}}); err != nil {
		t.Fatal(err)
	}
	if got := remote(); got == first {
		t.Errorf("certificate rotation kept connection %s", got)
	}
	if n := testutil.CollectAndCount(reg, "rest_client_exec_plugin_certificate_rotation_age"); n != 1 {
		t.Errorf("rotation age series: %d", n)
	}
	if got := testutil.ToFloat64(m.calls.WithLabelValues("0", "no_error")); got != 3 {
		t.Errorf("no_error calls = %v, want 3", got)
	}
	ttl := testutil.ToFloat64(m.ttl)
	current, err := tls.X509KeyPair([]byte(certB), []byte(keyB))
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(current.Leaf.NotAfter).Seconds(); ttl <= 0 || ttl > left+1 || ttl < left-60 {
		t.Errorf("ttl %v, want the current certificate's remaining lifetime (%v s)", ttl, left)
	}
}

func TestMetricsLabels(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	f := exectest.New(t).Exit(3)
	for _, cfg := range []Config{
		fakeConfig(f, V1),
		{Command: "kplug-no-such-plugin", APIVersion: V1, InteractiveMode: Never},
	} {
		if _, err := newSource(t, cfg, Options{Metrics: m}).Credential(t.Context(), nil); err == nil {
			t.Fatal("want an error")
		}
	}
	for labels, want := range map[[2]string]float64{
		{"3", "plugin_execution_error"}: 1,
		{"1", "plugin_not_found_error"}: 1,
		{"0", "no_error"}:               0,
	} {
		if got := testutil.ToFloat64(m.calls.WithLabelValues(labels[0], labels[1])); got != want {
			t.Errorf("rest_client_exec_plugin_call_total%v = %v, want %v", labels, got, want)
		}
	}
	if ttl := testutil.ToFloat64(m.ttl); ttl <= 1e300 {
		t.Errorf("ttl without certificates = %v, want +Inf", ttl)
	}
}

func TestStaticCredentialsWinOverThePlugin(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Stdout(tokenOutput(V1, "from-plugin", time.Time{}))
	srv := newAuthServer(t, "static")
	cfg := &rest.Config{Host: srv.URL, BearerToken: "static", ExecProvider: &clientcmdapi.ExecConfig{
		Command: f.Path(), APIVersion: V1, InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}
	src := newSource(t, fakeConfig(f, V1), Options{})
	for name, rt := range map[string]func() (http.RoundTripper, error){
		"HTTPTransport": func() (http.RoundTripper, error) { return HTTPTransport(cfg, src) },
		"ConfigFor":     func() (http.RoundTripper, error) { return rest.TransportFor(ConfigFor(cfg, src)) },
	} {
		tr, err := rt()
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
		if code, _ := do(t, tr, req); code != 200 {
			t.Errorf("%s: status %d, want the static token accepted", name, code)
		}
	}
	if f.Runs() != 0 {
		t.Errorf("the plugin ran %d times although the config has a static token", f.Runs())
	}
}

func TestTimeoutAppliesToNonInteractiveRuns(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Stdout(tokenOutput(V1, "late", time.Time{})).Sleep(20 * time.Second)
	host := quietHost()
	host.Timeout = 200 * time.Millisecond
	_, err := newSource(t, fakeConfig(f, V1), Options{Plugin: host}).Credential(t.Context(), nil)
	var te *execplugin.TimeoutError
	if !errors.As(err, &te) || !strings.HasSuffix(err.Error(), "timed out after 200ms and was killed") {
		t.Errorf("err = %v, want a timeout naming the plugin", err)
	}
}
