//go:build unix

package execproxy_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// execConfig is a kubeconfig exec block that runs the fake plugin p.
func execConfig(p *exectest.Plugin, env ...string) *clientcmdapi.ExecConfig {
	ec := &clientcmdapi.ExecConfig{
		Command: p.Path(), APIVersion: execcred.V1, InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}
	for _, kv := range append(p.Env(), env...) {
		name, value, _ := strings.Cut(kv, "=")
		ec.Env = append(ec.Env, clientcmdapi.ExecEnvVar{Name: name, Value: value})
	}
	return ec
}

// whoServer is an API server stand-in on a test CA's serving certificate that requests a
// client certificate of that CA (optional), and answers with who the request came as: the
// certificate's CN and the Authorization header. It accepts the token in valid, or any
// certificate; anything else is a 401.
type whoServer struct {
	*httptest.Server
	ca    *testpki.CA
	valid atomic.Value // string
}

func newWhoServer(t *testing.T, validToken string) *whoServer {
	t.Helper()
	s := &whoServer{ca: testpki.NewTestCA(t, "execproxy-test-ca")}
	s.valid.Store(validToken)
	serving, err := s.ca.IssueServing("server", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := ""
		if certs := r.TLS.PeerCertificates; len(certs) > 0 {
			cn = certs[0].Subject.CommonName
		}
		auth := r.Header.Get("Authorization")
		if cn == "" && auth != "Bearer "+s.valid.Load().(string) {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "cn=%q auth=%q", cn, auth)
	}))
	s.TLS = &tls.Config{
		Certificates: []tls.Certificate{serving.MustTLS(t)},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    s.ca.Pool(),
		MinVersion:   tls.VersionTLS12,
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// config is a client configuration for the server, authenticated by exec.
func (s *whoServer) config(exec *clientcmdapi.ExecConfig) *rest.Config {
	return &rest.Config{Host: s.URL, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}, ExecProvider: exec}
}

// whoVia asks the server who the request came as, through rt.
func whoVia(t *testing.T, rt http.RoundTripper, url string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strconv.Itoa(resp.StatusCode) + " " + string(b)
}

// bothWays asks who the requests come as through the session's Config (client-go) and its
// Transport, which must agree.
func bothWays(t *testing.T, s *execproxy.Session, url string) (viaConfig, viaTransport string) {
	t.Helper()
	cfg, err := s.Config()
	if err != nil {
		t.Fatal(err)
	}
	fromConfig, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := s.Transport()
	if err != nil {
		t.Fatal(err)
	}
	return whoVia(t, fromConfig, url), whoVia(t, rt, url)
}

// TestSessionEveryCredential: Session.Config and Session.Transport authenticate the same
// way whatever the plugin answered, or when no plugin runs.
func TestSessionEveryCredential(t *testing.T) {
	t.Parallel()
	srv := newWhoServer(t, "tok")
	client, err := srv.ca.IssueClient("alice", "alice")
	if err != nil {
		t.Fatal(err)
	}
	certAnswer := fmt.Sprintf(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":%q,"clientKeyData":%q}}`, client.CertPEM, client.KeyPEM)
	tests := []struct {
		name     string
		stdout   string
		static   string // a bearer token in the config itself
		want     string
		wantRuns int
	}{
		{"no plugin: static credentials win", `{}`, "tok", `200 cn="" auth="Bearer tok"`, 0},
		{"token", `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok"}}`, "", `200 cn="" auth="Bearer tok"`, 1},
		// client-go's exec provider presents the certificate: it runs the plugin once more.
		{"client certificate", certAnswer, "", `200 cn="alice" auth=""`, 2},
	}
	for _, tt := range tests {
		p := exectest.New(t).Stdout(tt.stdout)
		cfg := srv.config(execConfig(p))
		cfg.BearerToken = tt.static
		s, err := execproxy.Connect(t.Context(), cfg, execproxy.Options{RuntimeDir: t.TempDir()})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		viaConfig, viaTransport := bothWays(t, s, srv.URL+"/who")
		if viaConfig != tt.want || viaTransport != tt.want || p.Runs() != tt.wantRuns {
			t.Errorf("%s: Config %s, Transport %s after %d runs; want %s after %d", tt.name, viaConfig, viaTransport, p.Runs(), tt.want, tt.wantRuns)
		}
		if _, err := s.Kubeconfig(); !errors.Is(err, execproxy.ErrNotProxied) {
			t.Errorf("%s: Kubeconfig without a proxy: %v", tt.name, err)
		}
		s.Close()
	}
}

// TestSessionTransportRunsACertificatePluginOnce: a one-shot request (kplug request)
// through Transport presents the certificate the session already has; client-go is not
// made to run the plugin, or a login, a second time.
func TestSessionTransportRunsACertificatePluginOnce(t *testing.T) {
	t.Parallel()
	srv := newWhoServer(t, "tok")
	client, err := srv.ca.IssueClient("alice", "alice")
	if err != nil {
		t.Fatal(err)
	}
	p := exectest.New(t).Stdout(fmt.Sprintf(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":%q,"clientKeyData":%q}}`, client.CertPEM, client.KeyPEM))
	s, err := execproxy.Connect(t.Context(), srv.config(execConfig(p)), execproxy.Options{RuntimeDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rt, err := s.Transport()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := whoVia(t, rt, srv.URL+"/who"), `200 cn="alice" auth=""`; got != want || p.Runs() != 1 {
		t.Errorf("Transport: %s after %d runs; want %s after 1", got, p.Runs(), want)
	}
}

// TestSessionTokenRefreshedAfter401: with a token, the session's requests carry kplug's
// pipeline: a 401 refreshes the token and the request is sent again.
func TestSessionTokenRefreshedAfter401(t *testing.T) {
	t.Parallel()
	srv := newWhoServer(t, "old")
	p := exectest.New(t).Stdout(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"old"}}`)
	s, err := execproxy.Connect(t.Context(), srv.config(execConfig(p)), execproxy.Options{RuntimeDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv.valid.Store("new")
	p.Stdout(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"new"}}`)
	viaConfig, viaTransport := bothWays(t, s, srv.URL+"/who")
	if want := `200 cn="" auth="Bearer new"`; viaConfig != want || viaTransport != want || p.Runs() != 2 {
		t.Errorf("after the server rotated its token: Config %s, Transport %s after %d runs; want %s after 2", viaConfig, viaTransport, p.Runs(), want)
	}
}

// TestSessionConfigErrors: an exec block kplug cannot use is a *execcred.ConfigError, and
// nothing runs.
func TestSessionConfigErrors(t *testing.T) {
	t.Parallel()
	p := exectest.New(t)
	ec := execConfig(p)
	ec.APIVersion = "client.authentication.k8s.io/v2"
	_, err := execproxy.Connect(t.Context(), &rest.Config{Host: "https://127.0.0.1:1", ExecProvider: ec}, execproxy.Options{RuntimeDir: t.TempDir()})
	var ce *execcred.ConfigError
	if !errors.As(err, &ce) || err.Error() != `exec plugin: invalid apiVersion "client.authentication.k8s.io/v2"` || p.Runs() != 0 {
		t.Errorf("Connect: %v after %d runs", err, p.Runs())
	}
}

// TestPluginThatIsItsOwnProxy runs a plugin that answers and keeps serving, through the
// client runtime, and checks that it serves requests and ends with its client's lock.
func TestPluginThatIsItsOwnProxy(t *testing.T) {
	up := upstream(t)
	dir, err := os.MkdirTemp("", "kp") // short: socket paths are limited to ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := exectest.New(t).Behaviour("self-proxy")
	ec := execConfig(p, "SOCKET_DIR="+filepath.Join(dir, "proxy"))
	ec.ProvideClusterInfo = true
	cfg := &rest.Config{Host: up.URL, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM(up)}, ExecProvider: ec}
	s, err := execproxy.Connect(t.Context(), cfg, execproxy.Options{RuntimeDir: filepath.Join(dir, "client")})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Proxied() {
		s.Close()
		t.Fatal("no proxyConfig in the answer")
	}
	rt, err := s.Transport()
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: rt, Timeout: 10 * time.Second}
	if got := get(t, c, up.URL+"/version"); !strings.HasPrefix(got, "GET /version") {
		t.Errorf("through the plugin-proxy: %q", got)
	}
	c.CloseIdleConnections()
	s.Close() // the client goes: the proxy must follow
	// Wait for the process itself, not only its socket, so that the runner's background
	// reaper has finished too.
	pid, err := os.ReadFile(filepath.Join(p.Dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the plugin-proxy to exit with its client", func() bool {
		_, err := os.Stat("/proc/" + string(pid))
		return errors.Is(err, os.ErrNotExist)
	})
}

func caPEM(s *httptest.Server) []byte { return testpki.PEM("CERTIFICATE", s.Certificate().Raw) }
