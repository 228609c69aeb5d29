package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/swtpm"
	"github.com/kplug/kplug/test/e2e/framework"
)

// approveWhenAsked approves, as the admin and with kubectl, each of the named
// CertificateSigningRequests once it exists, as the admin a how-to tells the reader to
// ask would; it returns once all are approved or the test ends.
func approveWhenAsked(t *testing.T, cp *framework.ControlPlane, names ...string) (wait func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, name := range names {
			for ctx.Err() == nil {
				if err := cp.Kubectl(ctx, cp.Admin, "certificate", "approve", name).Run(); err == nil {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}()
	wait = func() { cancel(); wg.Wait() }
	t.Cleanup(wait)
	return wait
}

// TestTPMHowToExecProxy runs docs/exec-proxy.md's TPM how-to as a reader would, with a
// software TPM for theirs and kube-controller-manager signing the approved request: the
// key is created in the TPM, the cluster issues its certificate through a
// CertificateSigningRequest, and stock kubectl authenticates with it under kplug run.
// Then the reader renews, as the page says, and kubectl sees the renewed certificate.
func TestTPMHowToExecProxy(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	cp := framework.StartForTest(t, framework.Options{})
	if _, err := cp.StartClientCertificateSigner(t.Context()); err != nil {
		t.Fatal(err)
	}
	bin := kplugBin(t, cp)
	home := t.TempDir()
	// alice, who has a certificate from the client CA, may ask for more.
	kubectlAdmin(t, cp, "create", "clusterrole", "csr-requester", "--verb=create,get", "--resource=certificatesigningrequests")
	kubectlAdmin(t, cp, "create", "clusterrolebinding", "alice-csr-requester", "--clusterrole=csr-requester", "--user=alice")
	copyFileMode(t, cp.CertUser.Kubeconfig, filepath.Join(home, ".kube", "config"), 0o600)

	approveWhenAsked(t, cp, "alice-tpm")
	page := readDocSection(t, "docs/exec-proxy.md", "## How to: keep the client key in the TPM (no cgo)")
	out := page.run(t, home, []string{pathWith(bin), "HOME=" + home}, "/dev/tpmrm0", tpm.Socket)
	if !regexpMatch(`Username\s+alice`, out) || !regexpMatch(`Groups\s+\[tpm-users system:authenticated\]`, out) {
		t.Errorf("kubectl auth whoami through the TPM key does not show alice in tpm-users:\n%s", out)
	}
	crt := readCertificate(t, filepath.Join(home, ".kube", "kplug", "alice.crt"))
	if !strings.Contains(crt.Issuer.CommonName, "client CA") {
		t.Errorf("the certificate was issued by %q, want the cluster's client CA", crt.Issuer)
	}

	// Renewal, as the page says: the same key file, no --name, a new certificate renamed
	// over the old one, and the kubeconfig unchanged.
	t.Run("renewal", func(t *testing.T) {
		kplug := filepath.Join(bin, "kplug")
		key, certFile := filepath.Join(home, ".kube", "kplug", "alice.tss2"), filepath.Join(home, ".kube", "kplug", "alice.crt")
		env := hostEnv(home, "KPLUG_TPM_DEVICE="+tpm.Socket)
		done := make(chan string, 1)
		go func() {
			out, errOut, err := runEnv(t, env, kplug, "key", "request-certificate", key, "--user", "alice", "--group", "tpm-users", "--group", "renewed", "--cert-file", certFile)
			if err != nil {
				t.Errorf("renewal: %v\n%s%s", err, out, errOut)
			}
			done <- errOut
		}()
		// The generated name is on stderr once the request exists; approve every request
		// of alice's that is pending.
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			names, _ := cp.Kubectl(t.Context(), cp.Admin, "get", "csr", "-o", "jsonpath={range .items[?(@.spec.username==\"alice\")]}{.metadata.name}{\"\\n\"}{end}").Output()
			for _, n := range strings.Fields(string(names)) {
				if n != "alice-tpm" {
					_ = cp.Kubectl(t.Context(), cp.Admin, "certificate", "approve", n).Run()
				}
			}
			select {
			case errOut := <-done:
				if !strings.Contains(errOut, `groups ["renewed" "tpm-users"]`) {
					t.Errorf("renewal said:\n%s", errOut)
				}
				renewed := readCertificate(t, certFile)
				if renewed.SerialNumber.Cmp(crt.SerialNumber) == 0 {
					t.Fatal("the certificate file was not replaced")
				}
				out, errOut, err := runEnv(t, append(env, pathWith(bin)), kplug, "run", "--kubeconfig", filepath.Join(home, ".kube", "alice-tpm.yaml"), "--", "kubectl", "auth", "whoami")
				if err != nil || !regexpMatch(`Groups\s+\[renewed tpm-users system:authenticated\]`, out) {
					t.Errorf("whoami after renewal: %v\n%s%s", err, out, errOut)
				}
				return
			default:
			}
		}
		t.Fatal("the renewal did not finish within a minute")
	})
}

// TestTPMHowToHTTPSignatures runs docs/http-signatures.md's TPM how-to (2c) as a reader
// would, with a software TPM: the signing key is created in the TPM, the signing CA's
// keeper signs its request with OpenSSL, and kplug signature-proxy in front of
// kube-apiserver verifies requests signed in process (kplug request) and by the exec
// proxy (kplug run with kubectl) as the certificate's user.
func TestTPMHowToHTTPSignatures(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{}}})
	bin := kplugBin(t, cp)
	signingCA, _, _ := newSigningIdentity(t, cp, "unused")
	caKey := filepath.Join(t.TempDir(), "signing-ca.key")
	writeBytes(t, caKey, pkcs8PEM(t, signingCA.Key))
	proxy := startSignatureProxy(t, cp, signingCA.File)
	home := t.TempDir()

	page := readDocSection(t, "docs/http-signatures.md", "### 2c. A signing key in the TPM")
	out := page.run(t, home, []string{pathWith(bin), "HOME=" + home},
		"/dev/tpmrm0", tpm.Socket,
		"https://prod.example.com:8443", proxy.URL,
		"https://prod.example.com", signatureAudience,
		"/etc/kplug/prod-ca.crt", cp.PKI.ClusterCA.File,
		"/etc/kplug/signing-ca.crt", signingCA.File,
		"/etc/kplug/signing-ca.key", caKey,
		"/home/alice", home)
	if !strings.Contains(out, `"username":"sig:alice"`) || !strings.Contains(out, `"developers"`) {
		t.Errorf("kplug request signed with the TPM key was not served as sig:alice:\n%s", out)
	}
	if !regexpMatch(`Username\s+sig:alice`, out) {
		t.Errorf("kubectl through the signing exec proxy was not served as sig:alice:\n%s", out)
	}
	// The key file is a TPM key, not a software one.
	b, err := os.ReadFile(filepath.Join(home, ".kube", "kplug", "sign.tss2"))
	if err != nil {
		t.Fatal(err)
	}
	if block, _ := pem.Decode(b); block == nil || block.Type != "TSS2 PRIVATE KEY" {
		t.Errorf("the page's key file is not a TSS2 key file:\n%s", b)
	} else if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		t.Error("the page's key file parses as a software key")
	}
}

// kubectlAdmin runs kubectl as the admin, failing t if it fails.
func kubectlAdmin(t *testing.T, cp *framework.ControlPlane, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if out, err := cp.Kubectl(ctx, cp.Admin, args...).CombinedOutput(); err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
