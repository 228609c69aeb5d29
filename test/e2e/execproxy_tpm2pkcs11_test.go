//go:build cgo && linux

package e2e

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/tpm2pkcs11"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestExecProxyTPM2PKCS11: stock kubectl under `kplug run` authenticates to the real
// apiserver with a client key made in a (software) TPM by tpm2_ptool and used through the
// tpm2-pkcs11 module, as docs/exec-proxy.md describes: kplug proxy-plugin --client-key
// pkcs11:...?module-path=.../libtpm2_pkcs11.so. The proxy finds the store, the TCTI and the
// resource manager's bus through the environment kubectl passes on.
func TestExecProxyTPM2PKCS11(t *testing.T) {
	tok, pinFile := tpm2pkcs11.NewTestToken(t, "kplug-e2e-tpm")
	pub, err := tok.AddKey("dora", "ecc256")
	if err != nil {
		t.Fatal(err)
	}
	cp := framework.StartForTest(t, framework.Options{})
	dir := t.TempDir()
	kplug := buildKplug(t, dir)
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	cert, err := cp.PKI.ClientCA.IssueFor("dora", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "dora", Organization: []string{"tpm-users"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, pub, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := proxyKubeconfig(t, cp, kplug, dir, map[string][]string{
		"tpm": {"--client-cert", cert, "--client-key", tok.URI("dora", pinFile)},
	})
	out, errOut, err := run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "tpm", "--",
		filepath.Join(cp.BinDir, "kubectl"), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
	if err != nil || !strings.HasPrefix(out, "dora ") || !strings.Contains(out, "tpm-users") {
		t.Errorf("kubectl auth whoami: %q, %v; want dora in tpm-users\n%s", out, err, errOut)
	}
	waitNoSockets(t, filepath.Join(dir, "run", "kplug"), 5*time.Second)
}
