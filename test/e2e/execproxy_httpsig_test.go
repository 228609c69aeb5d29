//go:build cgo

package e2e

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/internal/testkit/softhsm"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestExecProxySignKEP6308: stock kubectl under `kplug run`, through kplug's exec proxy
// signing each request in the KEP-6308 profile (a key file, and a key on a SoftHSM2
// token, each with a certificate from a signing CA), through kplug signature-proxy, to a
// real kube-apiserver that sees the certificate's user: whoami, a create with a body
// (content-digest), a get, a watch, a delete.
func TestExecProxySignKEP6308(t *testing.T) {
	tok, pinFile := softhsm.NewTestToken(t, "kplug-e2e")
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{}}})
	dir := t.TempDir()
	kplug := buildKplug(t, dir)
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	signingCA, err := cp.PKI.NewCA("signing-ca", "kplug-e2e signing CA")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(cn string, pub crypto.PublicKey) string {
		path, err := signingCA.IssueFor(cn, &x509.Certificate{Subject: pkix.Name{CommonName: cn, Organization: []string{"signers"}}}, pub, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	fileKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "erin.key")
	writeBytes(t, keyFile, pkcs8PEM(t, fileKey))
	hsmPub, err := tok.Generate("ecdsa-p256", "frank")
	if err != nil {
		t.Fatal(err)
	}
	proxy := startSignatureProxy(t, cp, signingCA.File)
	sign := func(key, cert string) *clientcmdapi.ExecConfig {
		return proxyExec(kplug, nil, "--sign", "rfc9421", "--sign-key", key, "--sign-cert", cert, "--sign-audience", signatureAudience)
	}
	kubeconfig := frontKubeconfig(t, proxy.URL, cp.PKI.ClusterCA.Cert, dir, map[string]*clientcmdapi.ExecConfig{
		"file": sign(keyFile, issue("erin", fileKey.Public())),
		"hsm":  sign(tok.URI("frank", pinFile), issue("frank", hsmPub)),
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// A plain Role: the aggregated "edit" ClusterRole is empty without a controller manager.
	for _, args := range [][]string{
		{"create", "role", "configmaps", "--verb=get,list,watch,create,delete", "--resource=configmaps", "-n", "default"},
		{"create", "rolebinding", "signers-configmaps", "--role=configmaps", "--group=signers", "-n", "default"},
	} {
		if out, err := cp.Kubectl(ctx, cp.Admin, args...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	kubectl := filepath.Join(cp.BinDir, "kubectl")

	for context, user := range map[string]string{"file": "sig:erin", "hsm": "sig:frank"} {
		t.Run(context, func(t *testing.T) {
			kc := func(args ...string) (string, string, error) {
				return run(t, kplug, append([]string{"run", "--kubeconfig", kubeconfig, "--context", context, "--", kubectl}, args...)...)
			}
			if out, errOut, err := kc("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || out != user {
				t.Fatalf("whoami: %q, %v\n%s", out, err, errOut)
			}
			name := "signed-by-" + context
			steps := [][]string{
				{"create", "configmap", name, "--from-literal=k=v"},
				{"get", "configmap", name, "-o", "jsonpath={.data.k}"},
				{"get", "--raw", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3D" + name},
				{"delete", "configmap", name},
			}
			want := []string{"configmap/" + name + " created", "v", `"type":"ADDED"`, `configmap "` + name + `" deleted`}
			for i, args := range steps {
				if out, errOut, err := kc(args...); err != nil || !strings.Contains(out, want[i]) {
					t.Errorf("kubectl %s: %q, %v\n%s", strings.Join(args, " "), out, err, errOut)
				}
			}
		})
	}
	waitNoSockets(t, filepath.Join(dir, "run", "kplug"), 5*time.Second)
}
