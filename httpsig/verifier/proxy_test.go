package verifier

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/testpki"
)

func writeConfig(t *testing.T, path, doc string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReload: a changed valid configuration is used from then on; an invalid one is
// refused and the previous one kept (KEP-6308 "Server configuration").
func TestReload(t *testing.T) {
	t.Parallel()
	ca := testpki.NewTestCA(t, "signing CA")
	path := filepath.Join(t.TempDir(), "authn.yaml")
	doc := configYAML(ca)
	writeConfig(t, path, doc)
	serving, err := testpki.NewTestCA(t, "serving CA").IssueServing("proxy", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert := serving.MustTLS(t)
	p, err := NewProxy(ProxyOptions{ConfigFile: path, Upstream: &url.URL{Scheme: "https", Host: "127.0.0.1:1"},
		GetServingCertificate: func() (*tls.Certificate, error) { return &cert, nil }})
	if err != nil {
		t.Fatal(err)
	}
	audience := func() string { return p.auth.Load().cfg.Policy.RequiredHeaders["X-K8s-Audience"][0] }
	if changed, err := p.Reload(); changed || err != nil {
		t.Errorf("unchanged file: %v %v", changed, err)
	}
	writeConfig(t, path, strings.Replace(doc, "https://cluster.example", "https://renamed.example", 1))
	if changed, err := p.Reload(); !changed || err != nil || audience() != "https://renamed.example" {
		t.Errorf("changed file: %v %v, audience %s", changed, err, audience())
	}
	writeConfig(t, path, strings.Replace(doc, "X-K8s-Audience: [https://cluster.example]", "X-K8s-Audience: []", 1))
	if changed, err := p.Reload(); changed || err == nil || !strings.Contains(err.Error(), "requiredSignedHeaders: httpsig: required header X-K8s-Audience needs at least one accepted value") || audience() != "https://renamed.example" {
		t.Errorf("invalid file: %v %v, audience %s", changed, err, audience())
	}
}

// TestServe: the proxy answers over TLS (an unsigned request is 401) and returns nil
// once its context ends.
func TestServe(t *testing.T) {
	t.Parallel()
	ca := testpki.NewTestCA(t, "signing CA")
	path := filepath.Join(t.TempDir(), "authn.yaml")
	writeConfig(t, path, configYAML(ca))
	servingCA := testpki.NewTestCA(t, "serving CA")
	serving, err := servingCA.IssueServing("proxy", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert := serving.MustTLS(t)
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxy(ProxyOptions{ConfigFile: path, Upstream: &url.URL{Scheme: "https", Host: "127.0.0.1:1"}, Listener: ln,
		GetServingCertificate: func() (*tls.Certificate, error) { return &cert, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: servingCA.Pool(), MinVersion: tls.VersionTLS12}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+ln.Addr().String()+"/api", nil)
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	transport.CloseIdleConnections()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("status %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// FuzzParseConfig: whatever the file holds, ParseConfig returns a configuration with an
// audience and at least one authenticator, or an error; it never panics.
func FuzzParseConfig(f *testing.F) {
	seed, err := os.ReadFile("testdata/authentication-config.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\nhttpSignature: {authenticators: [{name: a, resolver: {}}]}\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data, "testdata", nil)
		if err == nil && (len(c.authenticators) == 0 || len(c.Policy.RequiredHeaders["X-K8s-Audience"]) == 0) {
			t.Fatalf("accepted %q without an authenticator or audience", data)
		}
	})
}
