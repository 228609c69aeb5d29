package verifier

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/testpki"
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
		GetServingCertificate: func() (*tls.Certificate, error) { return &cert, nil }, Client: fake.NewClientset(published())})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: servingCA.Pool(), MinVersion: tls.VersionTLS12}}
	poll.Until(t, "an unsigned request refused 401 once the request-header names are read", func() bool {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+ln.Addr().String()+"/api", nil)
		resp, err := (&http.Client{Transport: transport}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp.StatusCode == http.StatusUnauthorized
	})
	transport.CloseIdleConnections()
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

// TestSecurityRemovedCAStopsBeingTrusted (issue 27, N4): a CA removed from the
// certificateAuthorityFile, the configuration file untouched, is trusted no more after the
// next reload, also for a certificate it vouched for before (the certificate cache goes
// with the old configuration); the reload is logged with the anchor removed.
func TestSecurityRemovedCAStopsBeingTrusted(t *testing.T) {
	t.Parallel()
	ca0, ca1 := testpki.NewTestCA(t, "signing CA 0"), testpki.NewTestCA(t, "signing CA 1")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "cas.pem")
	writeConfig(t, caFile, string(ca0.CertPEM)+string(ca1.CertPEM))
	inline := "      certificateAuthority: |\n" + indent(ca0.CertPEM, 8) + "\n"
	config := filepath.Join(dir, "authn.yaml")
	writeConfig(t, config, strings.Replace(configYAML(ca0), inline, "      certificateAuthorityFile: cas.pem\n", 1))
	serving, err := testpki.NewTestCA(t, "serving CA").IssueServing("proxy", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert := serving.MustTLS(t)
	var logs bytes.Buffer
	p, err := NewProxy(ProxyOptions{ConfigFile: config, Upstream: &url.URL{Scheme: "https", Host: "127.0.0.1:1"}, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		GetServingCertificate: func() (*tls.Certificate, error) { return &cert, nil }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	leaf, key := leafFrom(t, ca1, "alice", nil, now.Add(-time.Hour), now.Add(time.Hour))
	authenticate := func() (string, error) {
		const path = "/api/v1/namespaces/default/configmaps"
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, strings.NewReader("{}"))
		req.Host = "example.com"
		req.Header = signedHeader(t, key, leaf, time.Now(), path, "{}")
		u, err := p.Authenticate(req)
		if err != nil {
			return "", err
		}
		return u.Username, nil
	}
	if user, err := authenticate(); user != "cert:alice" || err != nil {
		t.Fatalf("while CA 1 is in the file: %q %v", user, err)
	}
	if changed, err := p.Reload(); changed || err != nil {
		t.Errorf("nothing changed, yet Reload says %v %v", changed, err)
	}
	writeConfig(t, caFile, string(ca0.CertPEM))
	if changed, err := p.Reload(); !changed || err != nil {
		t.Fatalf("CA 1 removed from %s: Reload says %v %v", caFile, changed, err)
	}
	if user, err := authenticate(); err == nil || outcomeOf(err) != UnknownIssuer {
		t.Errorf("after CA 1 was removed: %q %v (%s); want %s", user, err, outcomeOf(err), UnknownIssuer)
	}
	removed := fmt.Sprintf("a0: CN=signing CA 1 (sha256:%x)", sha256.Sum256(ca1.Cert.Raw))
	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "configuration reloaded") {
			line = l
		}
	}
	if !strings.Contains(line, "changed=["+caFile+"]") || !strings.Contains(line, `anchors_added=[]`) || !strings.Contains(line, `anchors_removed="[`+removed+`]"`) {
		t.Errorf("the reload's log line %q does not say that %s changed and %s was removed", line, caFile, removed)
	}
}
