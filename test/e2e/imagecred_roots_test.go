package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

// The OCI image is FROM scratch: no CA bundle, so `kplug image-credential plugin
// token-exchange` in it verifies a public token endpoint against Mozilla's roots, which
// kplug carries (x509roots/fallback) and parses only for the commands that need them.
//
// No public endpoint can be reached from a test, so the endpoint here impersonates one: its
// certificate names a public root of the bundle (ISRG Root X1) as its issuer, but is
// signed by a key of the test's own. The real kplug binary, with no system roots
// (SSL_CERT_FILE and SSL_CERT_DIR name nothing), refuses it, and the refusal says it tried
// that public root as the authority: the roots were in the pool it verified with. Without
// them the refusal is a bare "certificate signed by unknown authority".
func TestImageCredentialTokenExchangeTrustsPublicRootsWithoutSystemRoots(t *testing.T) {
	public := bundleRoot(t, "ISRG Root X1")
	ca := testpki.NewTestCA(t, "impersonator")
	// The same key, under the public root's name: what it issues names that root as issuer.
	tmpl := *ca.Cert
	tmpl.RawSubject = public.RawSubject
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, ca.Key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	if ca.Cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	serving, err := ca.IssueServing("endpoint", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked <- struct{}{}
		http.Error(w, "the plugin trusted an impersonated public root", http.StatusTeapot)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving.MustTLS(t)}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	kplug := buildBinary(t, dir, "./cmd/kplug", "kplug")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kplug, "image-credential", "plugin", "token-exchange", "--endpoint", srv.URL+"/token")
	cmd.Env = hostEnv(dir, "SSL_CERT_FILE="+filepath.Join(dir, "no-bundle.pem"), "SSL_CERT_DIR="+filepath.Join(dir, "no-certs"))
	cmd.Stdin = strings.NewReader(`{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"registry.example/app:v1","serviceAccountToken":"sa-token"}`)
	out, err := cmd.CombinedOutput()
	if err == nil || len(asked) != 0 {
		t.Fatalf("token-exchange against an impersonated public root: %v, the endpoint asked: %v\n%s", err, len(asked) != 0, out)
	}
	want := `x509: certificate signed by unknown authority (possibly because of `
	tried := `while trying to verify candidate authority certificate "ISRG Root X1")`
	if !strings.Contains(string(out), want) || !strings.Contains(string(out), tried) {
		t.Errorf("token-exchange without system roots:\n%s\nwant the refusal to name the public root it tried: %s...%s", out, want, tried)
	}
}

// bundleRoot is the root named cn in the fallback bundle kplug carries.
func bundleRoot(t *testing.T, cn string) *x509.Certificate {
	t.Helper()
	for root := range bundle.Roots() {
		cert, err := x509.ParseCertificate(root.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		if cert.Subject.CommonName == cn {
			return cert
		}
	}
	t.Fatalf("no root %q in golang.org/x/crypto/x509roots/fallback/bundle", cn)
	return nil
}
