package cli

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kplug/kplug/internal/proxyplugin"
	"github.com/kplug/kplug/internal/testkit/swtpm"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// TestKeyCommands runs kplug key create, public, csr and kubeconfig against a software
// TPM: what each prints or writes, and the usage errors (exit 2) and refusals (exit 1)
// that leave nothing behind.
func TestKeyCommands(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	t.Setenv(proxyplugin.TPMDeviceEnv, tpm.Socket)
	dir := t.TempDir()
	key := filepath.Join(dir, "alice.tss2")

	code, out, errOut := run(t, "key", "create", key)
	if code != ExitOK || out != "" || !strings.HasPrefix(errOut, "created an ECDSA P-256 key in the TPM at "+tpm.Socket+"; its key file is "+key) {
		t.Fatalf("key create: %d %q %q", code, out, errOut)
	}
	code, _, errOut = run(t, "key", "create", key)
	if code != ExitFailure || !strings.Contains(errOut, "already exists: kplug does not replace a key file") {
		t.Errorf("key create over an existing file: %d %q", code, errOut)
	}
	code, _, errOut = run(t, "key", "create", "--algorithm", "dsa", filepath.Join(dir, "other"))
	if code != ExitUsage || !strings.Contains(errOut, `--algorithm "dsa": want one of ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072`) {
		t.Errorf("key create --algorithm dsa: %d %q", code, errOut)
	}
	// The second review's N7: an unset variable as --pin-source made a key without a PIN.
	code, _, errOut = run(t, "key", "create", "--pin-source", "", filepath.Join(dir, "other"))
	if code != ExitUsage || !strings.Contains(errOut, "--pin-source is empty") {
		t.Errorf("key create --pin-source '': %d %q", code, errOut)
	}
	if _, err := os.Lstat(filepath.Join(dir, "other")); err == nil {
		t.Error("a refused key create left a file")
	}
	// The second review's N6: a mistyped pin-value is not echoed.
	for _, args := range [][]string{
		{"key", "public", "tpm:file=" + key + "?pin-valueSECRET1"},
		{"key", "public", "tpm:file=" + key + "?pin-value=SECRET1"},
		{"key", "csr", "pkcs11:token=t;object=o?pin-value=SECRET1", "--user", "alice"},
	} {
		if code, _, errOut := run(t, args...); code == ExitOK || strings.Contains(errOut, "SECRET1") {
			t.Errorf("%v: %d, stderr %q shows the secret", args, code, errOut)
		}
	}

	code, out, _ = run(t, "key", "public", key)
	block, _ := pem.Decode([]byte(out))
	if code != ExitOK || block == nil || block.Type != "PUBLIC KEY" {
		t.Fatalf("key public: %d %q", code, out)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	code, out, _ = run(t, "key", "csr", key, "--user", "alice", "--group", "tpm-users")
	block, _ = pem.Decode([]byte(out))
	if code != ExitOK || block == nil || block.Type != "CERTIFICATE REQUEST" {
		t.Fatalf("key csr: %d %q", code, out)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil || csr.CheckSignature() != nil || csr.Subject.CommonName != "alice" || strings.Join(csr.Subject.Organization, ",") != "tpm-users" ||
		!csr.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(pub) {
		t.Errorf("the CSR is not alice's in tpm-users, signed by the key: %v %+v", err, csr.Subject)
	}
	if code, _, errOut := run(t, "key", "csr", key); code != ExitUsage || !strings.Contains(errOut, "--user is required") {
		t.Errorf("key csr without --user: %d %q", code, errOut)
	}

	// kubeconfig: the cluster of the current context, and an exec-proxy user with absolute
	// paths, from a certificate for the key.
	ca := testpki.NewTestCA(t, "cli-client-ca")
	issued, err := ca.IssueFor("alice", &x509.Certificate{Subject: pkix.Name{CommonName: "alice"}}, pub, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := os.ReadFile(issued)
	if err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(dir, "alice.crt")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	otherCert, err := ca.IssueClient("bob", "bob")
	if err != nil {
		t.Fatal(err)
	}
	source := filepath.Join(dir, "source.kubeconfig")
	if err := os.WriteFile(source, []byte(`apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster: {server: "https://prod.example.com:6443", certificate-authority-data: "`+"Zm9v"+`"}
users:
- name: admin
  user: {token: secret-token}
contexts:
- name: prod
  context: {cluster: prod, user: admin, namespace: team-a}
current-context: prod
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	out = filepath.Join(dir, "alice.kubeconfig")
	code, _, errOut = run(t, "key", "kubeconfig", "alice.tss2", "--cert-file", "alice.crt", "--kubeconfig", source, "--out", out)
	if code != ExitOK {
		t.Fatalf("key kubeconfig: %d %q", code, errOut)
	}
	cfg, err := clientcmd.LoadFromFile(out)
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.AuthInfos["alice"]
	c := cfg.Contexts[cfg.CurrentContext]
	if u == nil || u.Exec == nil || u.Token != "" || c == nil || c.Cluster != "prod" || c.Namespace != "team-a" ||
		cfg.Clusters["prod"].Server != "https://prod.example.com:6443" || string(cfg.Clusters["prod"].CertificateAuthorityData) != "foo" {
		t.Fatalf("kubeconfig: %+v", cfg)
	}
	if want := []string{"proxy-plugin", "--client-cert", certFile, "--client-key", key}; strings.Join(u.Exec.Args, " ") != strings.Join(want, " ") ||
		!u.Exec.ProvideClusterInfo {
		t.Errorf("exec block args %q, provideClusterInfo %v; want %q, true", u.Exec.Args, u.Exec.ProvideClusterInfo, want)
	}
	if b, _ := os.ReadFile(out); strings.Contains(string(b), "secret-token") {
		t.Error("the new kubeconfig carries the source user's token")
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode: %v %v", fi.Mode(), err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--cert-file", certFile, "--out", out}, ExitFailure, "already exists: kplug does not replace a kubeconfig"},
		{[]string{"--cert-file", otherCert.CertFile}, ExitUsage, "the certificate is for another key"},
		{[]string{}, ExitUsage, "--cert-file is required"},
		{[]string{"--cert-file", certFile, "--context", "nope"}, ExitUsage, `no context "nope"`},
		// The second review's N3: paths inside a key URI stay relative, and proxy-plugin
		// would read (or load) them in whatever directory kubectl runs in.
		{[]string{"tpm:file=alice.tss2", "--cert-file", certFile}, ExitUsage, "the key URI's file=alice.tss2 is a relative path"},
		{[]string{"tpm:file=" + key + "?pin-source=file:pin", "--cert-file", certFile}, ExitUsage, "the key URI's pin-source=pin is a relative path"},
		{[]string{"pkcs11:token=t;object=o?module-path=lib.so", "--cert-file", certFile}, ExitUsage, "the key URI's module-path=lib.so is a relative path"},
	} {
		ref := key
		if len(tc.args) > 0 && strings.Contains(tc.args[0], ":") {
			ref, tc.args = tc.args[0], tc.args[1:]
		}
		code, _, errOut := run(t, append([]string{"key", "kubeconfig", ref, "--kubeconfig", source}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("key kubeconfig %v: %d %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}
