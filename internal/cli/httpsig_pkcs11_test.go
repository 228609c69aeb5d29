//go:build cgo

package cli

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/httpsigtest"
	"github.com/kplug/kplug/internal/testkit/softhsm"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// TestRequestSignsWithPKCS11Key: an httpSignature keyFile that is a pkcs11: URI signs on
// a SoftHSM2 token, through the key loader proxy-plugin --sign-key uses.
func TestRequestSignsWithPKCS11Key(t *testing.T) {
	tok, pinFile := softhsm.NewTestToken(t, "kplug-httpsig")
	pub, err := tok.Generate("ecdsa-p256", "signer")
	if err != nil {
		t.Fatal(err)
	}
	certFile, err := testpki.NewTestCA(t, "cli-signing-ca").IssueFor("signer", &x509.Certificate{Subject: pkix.Name{CommonName: "alice"}}, pub, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	srv := httpsigtest.NewTLS(t, signingAudience, nil)
	kc := signingKubeconfig(t, srv, fmt.Sprintf(`    httpSignature:
      apiVersion: client.authentication.k8s.io/v1alpha1
      certFile: %q
      keyFile: %q
      signedHeaders: [{name: X-K8s-Audience, value: %q}]`, certFile, tok.URI("signer", pinFile), signingAudience))
	code, out, errOut := run(t, "request", "--kubeconfig", kc, "-d", `{"kind":"SelfSubjectReview"}`, "/apis")
	if code != ExitOK || !strings.HasPrefix(out, httpsig.CertificateKeyIDPrefix) || errOut != "" {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
}
