package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestHMACHowToAWSAccessKey runs docs/http-signatures.md's how-to "sign kubectl's requests
// with an AWS access key, no token" as a reader would: the page writes the resolver's key
// file and starts kplug signature-resolver, writes the AuthenticationConfiguration and
// starts kplug signature-proxy in front of kube-apiserver (each server as a reader runs it
// in a terminal of its own), writes alice's kubeconfig and runs kubectl under kplug run,
// with the AWS credentials the page exports and nothing else. kube-apiserver must see
// alice, in the group the key file gives her. The test does only what the page leaves to
// the cluster: kubeadm's certificates where the page names them, and the RBAC of "Set up".
func TestHMACHowToAWSAccessKey(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	bin := kplugBin(t, cp)
	grantSignatureProxy(t, cp) // the administrator's part: docs/signature-proxy-rbac.yaml
	root, work, home := t.TempDir(), t.TempDir(), t.TempDir()
	etc, run := filepath.Join(root, "etc"), filepath.Join(root, "run")
	p := cp.PKI
	for dst, src := range map[string]string{
		"kubernetes/pki/ca.crt":                 p.ClusterCA.File,
		"kubernetes/pki/front-proxy-client.crt": p.ProxyClient.CertFile,
		"kubernetes/pki/front-proxy-client.key": p.ProxyClient.KeyFile,
		"kplug/verifier.crt":                    p.Serving.CertFile,
		"kplug/verifier.key":                    p.Serving.KeyFile,
		"kplug/prod-ca.crt":                     p.ClusterCA.File,
	} {
		copyFileMode(t, src, filepath.Join(etc, dst), 0o600)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	page := readDocSection(t, "docs/http-signatures.md", "## How to: sign kubectl's requests with an AWS access key, no token")
	replace := []string{
		"https://prod.example.com:8443", "https://" + addr,
		"0.0.0.0:8443", addr,
		"https://127.0.0.1:6443", cp.Servers[0].URL,
		"/etc/kplug/", etc + "/kplug/",
		"/etc/kubernetes/", etc + "/kubernetes/",
		"/run/kplug/", run + "/kplug/",
	}
	page.replaced(t, replace...) // every one must still be in the page
	env := []string{pathWith(bin), "HOME=" + home}

	keys, rest := page.splitAt(t, "kplug signature-resolver")
	resolver, rest := rest.splitAt(t, "kind: AuthenticationConfiguration")
	authn, rest := rest.splitAt(t, "kplug signature-proxy")
	proxy, client := rest.splitAt(t, "kind: Config")

	keys.run(t, work, env, keys.only(replace...)...)
	res := resolver.start(t, cp, "signature-resolver", work, env, resolver.only(replace...)...)
	socket := filepath.Join(run, "kplug", "resolver", "resolver.sock")
	poll.Until(t, "the page's signature-resolver to listen on "+socket, func() bool {
		if !res.Running() {
			t.Fatalf("signature-resolver exited: %v\n%s", res.Err(), res.Tail(20))
		}
		fi, err := os.Stat(socket)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	})
	authn.run(t, work, env, authn.only(replace...)...)
	px := proxy.start(t, cp, "signature-proxy", work, env, proxy.only(replace...)...)
	poll.Until(t, "the page's signature-proxy to forward", func() bool {
		if !px.Running() {
			t.Fatalf("signature-proxy exited: %v\n%s", px.Err(), px.Tail(20))
		}
		return strings.Contains(px.Tail(200), signatureProxyForwarding)
	})
	out := client.run(t, work, env, client.only(replace...)...)
	if !regexpMatch(`Username\s+alice\n`, out) || !regexpMatch(`Groups\s+\[developers system:authenticated\]`, out) {
		t.Errorf("kubectl auth whoami, signed with the AWS-derived key, is not alice in developers:\n%s", out)
	}
	if log := px.Tail(200); !strings.Contains(log, "signature proxy: authentication configuration loaded") || strings.Contains(log, "refused") {
		t.Errorf("the proxy's log:\n%s", log)
	}
}
