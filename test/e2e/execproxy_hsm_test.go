//go:build cgo

package e2e

import (
	"context"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/softhsm"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestExecProxyPKCS11HSM authenticates to the real apiserver with client keys generated on
// a SoftHSM2 token (ECDSA P-256 and RSA, which TLS 1.3 signs with PSS) and certificates
// from the control plane's client CA, in files or on the token; it rotates the certificate under a running proxy
// while a watch streams, and checks that bad input fails at start with one message.
func TestExecProxyPKCS11HSM(t *testing.T) {
	tok, pinFile := softhsm.NewTestToken(t, "kplug-e2e")
	cp := framework.StartForTest(t, framework.Options{})
	dir := t.TempDir()
	kplug := buildKplug(t, dir)
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))

	generate := func(kind, label string) crypto.PublicKey {
		pub, err := tok.Generate(kind, label)
		if err != nil {
			t.Fatal(err)
		}
		return pub
	}
	issue := func(name, user string, pub crypto.PublicKey, notAfter time.Time) string {
		path, err := cp.PKI.ClientCA.IssueFor(name, &x509.Certificate{
			Subject:     pkix.Name{CommonName: user, Organization: []string{"hsm-users"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, pub, notAfter)
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	day := time.Now().Add(24 * time.Hour)
	ecPub := generate("ecdsa-p256", "carol")
	rsaPub := generate("rsa-2048", "carol-rsa")
	p224Pub := generate("ecdsa-p224", "carol-p224")
	wrongPIN := filepath.Join(dir, "wrong-pin")
	writeBytes(t, wrongPIN, []byte("0000\n"))
	rotating := issue("rotating", "carol", ecPub, day)
	// A certificate kept on the token itself, beside its key.
	onToken, err := os.ReadFile(issue("carol-token", "carol-token", rsaPub, day))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(onToken)
	if err := tok.StoreCertificate("carol-rsa", block.Bytes); err != nil {
		t.Fatal(err)
	}

	users := map[string][]string{
		"hsm-ec":         {"--client-cert", issue("carol", "carol", ecPub, day), "--client-key", tok.URI("carol", pinFile)},
		"hsm-rsa":        {"--client-cert", issue("carol-rsa", "carol-rsa", rsaPub, day), "--client-key", tok.URI("carol-rsa", pinFile)},
		"hsm-token-cert": {"--client-key", tok.URI("carol-rsa", pinFile)},
		"hsm-rotating":   {"--client-cert", rotating, "--client-key", tok.URI("carol", pinFile)},
		"wrong-pin":      {"--client-cert", issue("carol2", "carol", ecPub, day), "--client-key", tok.URI("carol", wrongPIN)},
		"missing-token":  {"--client-cert", issue("carol3", "carol", ecPub, day), "--client-key", strings.Replace(tok.URI("carol", pinFile), "token=kplug-e2e", "token=absent", 1)},
		"missing-object": {"--client-cert", issue("carol4", "carol", ecPub, day), "--client-key", tok.URI("absent", pinFile)},
		"expired":        {"--client-cert", issue("expired", "carol", ecPub, time.Now().Add(-time.Minute)), "--client-key", tok.URI("carol", pinFile)},
		"mismatch":       {"--client-cert", issue("mismatch", "carol", rsaPub, day), "--client-key", tok.URI("carol", pinFile)},
		"unsupported":    {"--client-cert", issue("p224", "carol", p224Pub, day), "--client-key", tok.URI("carol-p224", pinFile)},
	}
	kubeconfig := proxyKubeconfig(t, cp, kplug, dir, users)

	t.Run("the apiserver authenticates the token's keys", func(t *testing.T) {
		for context, user := range map[string]string{"hsm-ec": "carol", "hsm-rsa": "carol-rsa", "hsm-token-cert": "carol-token"} {
			out, errOut, err := run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", context,
				"/apis/authentication.k8s.io/v1/selfsubjectreviews", "-d", selfSubjectReview)
			if err != nil || !strings.Contains(out, `"username":"`+user+`"`) || !strings.Contains(out, `"hsm-users"`) {
				t.Errorf("%s: %q, %v\n%s", context, out, err, errOut)
			}
		}
	})

	t.Run("bad input fails at start with one message", func(t *testing.T) {
		for context, want := range map[string]string{
			"wrong-pin":      `pkcs11: token "kplug-e2e" refused the PIN`,
			"missing-token":  `pkcs11: no token "absent" in module`,
			"missing-object": `pkcs11: no private key object "absent" on token "kplug-e2e"`,
			"expired":        `certificate for "carol" expired at`,
			"mismatch":       `does not match the certificate (the certificate is for a different RSA 2048 key)`,
			"unsupported":    `unsupported key type ECDSA P-224`,
		} {
			out, errOut, err := run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", context, "/version")
			if err == nil || !strings.Contains(errOut, want) || strings.Contains(errOut, tok.PIN) {
				t.Errorf("%s: err %v, stdout %q, stderr:\n%s\nwant the message %q", context, err, out, errOut, want)
			}
		}
	})

	t.Run("rotation without restart keeps streams open", func(t *testing.T) {
		// carol may read and watch config maps; the admin creates one during the watch.
		admin := func(args ...string) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if out, err := cp.Kubectl(ctx, cp.Admin, args...).CombinedOutput(); err != nil {
				t.Fatalf("kubectl %v: %v\n%s", args, err, out)
			}
		}
		admin("create", "role", "configmap-reader", "-n", "default", "--verb=get,list,watch", "--resource=configmaps")
		admin("create", "rolebinding", "hsm-users-read", "-n", "default", "--role=configmap-reader", "--group=hsm-users")
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) { // RBAC caches catch up
			out, _ := cp.Kubectl(t.Context(), cp.Admin, "auth", "can-i", "watch", "configmaps", "-n", "default", "--as=carol", "--as-group=hsm-users").Output()
			if strings.TrimSpace(string(out)) == "yes" || time.Now().After(deadline) {
				break
			}
		}
		newPub := generate("ecdsa-p256", "carol") // a second key under the same label
		next := issue("carol-next", "carol-2", newPub, day)
		watchOut := filepath.Join(dir, "watch.out")
		kubectl := filepath.Join(cp.BinDir, "kubectl")
		whoami := kubectl + " auth whoami -o jsonpath={.status.userInfo.username}; echo"
		script := strings.Join([]string{
			kubectl + ` get configmaps -n default --watch -o name > ` + watchOut + ` & watch=$!`,
			`for i in $(seq 100); do [ -s ` + watchOut + ` ] && break; sleep 0.1; done`, // the watch lists kube-root-ca.crt first
			whoami,
			`cp ` + next + ` ` + rotating + `.new && mv ` + rotating + `.new ` + rotating,
			`sleep 3`, // the proxy checks the certificate every 2s
			whoami,
			`echo ready > ` + watchOut + `.rotated`,
			`for i in $(seq 150); do grep -q after-rotation ` + watchOut + ` && break; sleep 0.1; done`,
			`kill $watch`, // fails if the watch has ended
		}, "\n")
		done := make(chan struct{})
		var out, errOut string
		var err error
		go func() {
			defer close(done)
			out, errOut, err = run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "hsm-rotating", "--", "sh", "-c", script)
		}()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if _, err := os.Stat(watchOut + ".rotated"); err == nil {
				break
			}
		}
		admin("create", "configmap", "after-rotation", "-n", "default")
		<-done
		if err != nil || out != "carol\ncarol-2\n" {
			t.Errorf("whoami before and after rotation: %q, %v; want carol then carol-2\n%s", out, err, errOut)
		}
		if b, _ := os.ReadFile(watchOut); !strings.Contains(string(b), "configmap/after-rotation") {
			t.Errorf("the watch opened before the rotation missed the config map created after it: %q", b)
		}
	})
	waitNoSockets(t, filepath.Join(dir, "run", "kplug"), 5*time.Second)
}
