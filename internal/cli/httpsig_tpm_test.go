package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/testkit/httpsigtest"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// TestSecurityHTTPSignatureKeyQuery is F1 and I3 of the issue 30 review: a kubeconfig's
// httpSignature keyFile is the kubeconfig's choice, not the user's, so a tpm: URI there may
// not choose the TPM or the file sent to it as the auth value, and a PKCS#11 module it
// names must pass the kuberc policy, as for proxy-plugin.
func TestSecurityHTTPSignatureKeyQuery(t *testing.T) {
	t.Parallel()
	srv := httpsigtest.NewTLS(t, signingAudience, nil)
	deny := writeKuberc(t, "credentialPluginPolicy: DenyAll\n")
	kp, err := testpki.NewTestCA(t, "cli-signing-ca").IssueClient("signer", "alice")
	if err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(t.TempDir(), "tls.crt")
	if err := os.WriteFile(certFile, kp.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		keyFile string
		args    []string
		want    string
	}{
		{"tpm:handle=0x81000010?device=/tmp/evil/tpm.sock", nil,
			"Error: httpSignature.keyFile: a tpm: URI here may not have device= or pin-source= (the kubeconfig chose it"},
		{"tpm:handle=0x81000010?pin-source=file:/etc/hostname", nil,
			"Error: httpSignature.keyFile: a tpm: URI here may not have device= or pin-source= (the kubeconfig chose it"},
		{"pkcs11:token=t;object=o?module-path=/nonexistent/evil.so", []string{"--kuberc", deny},
			"Error: httpSignature.keyFile: the PKCS#11 module /nonexistent/evil.so: "},
	} {
		kc := signingKubeconfig(t, srv, fmt.Sprintf(`    httpSignature:
      apiVersion: client.authentication.k8s.io/v1alpha1
      certFile: %q
      keyFile: %q
      signedHeaders: [{name: X-K8s-Audience, value: %q}]`, certFile, tc.keyFile, signingAudience))
		code, out, errOut := run(t, append([]string{"request", "--kubeconfig", kc, "/api"}, tc.args...)...)
		if code == ExitOK || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("keyFile %s: code %d, stdout %q, stderr %q; want stderr with %q", tc.keyFile, code, out, errOut, tc.want)
		}
	}
}
