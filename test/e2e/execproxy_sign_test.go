package e2e

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/testkit/sigverify"
	"github.com/kplug/kplug/test/e2e/framework"
)

// signingFront stands where a SigV4-verifying gateway would: in front of the real
// apiserver, it verifies each request's SigV4 signature, maps the signer to a user, and
// forwards the request with request-header authentication (the front-proxy client
// certificate), so that the apiserver answers as that user. (KEP-6308 signatures go
// through the real verifier, kplug signature-proxy: TestExecProxySignKEP6308.)
func signingFront(t *testing.T, cp *framework.ControlPlane, accessKeys map[string]aws.Credentials, users map[string]string) *httptest.Server {
	t.Helper()
	target, err := url.Parse(cp.Servers[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	proxyCert, err := tls.LoadX509KeyPair(cp.PKI.ProxyClient.CertFile, cp.PKI.ProxyClient.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cp.PKI.ClusterCA.Cert)
	upstream := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{proxyCert}}, ForceAttemptHTTP2: true}
	t.Cleanup(upstream.CloseIdleConnections)
	forward := &httputil.ReverseProxy{
		Transport: upstream,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			user := pr.In.Header.Get("X-Verified-Signer")
			for name := range pr.Out.Header {
				l := strings.ToLower(name)
				if l == "authorization" || strings.HasPrefix(l, "signature") || strings.HasPrefix(l, "x-amz-") || strings.HasPrefix(l, "x-remote-") || l == "x-verified-signer" || l == "content-digest" {
					pr.Out.Header.Del(name)
				}
			}
			pr.Out.Header.Set("X-Remote-User", user)
			pr.Out.Header.Set("X-Remote-Group", "signers")
		},
	}
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 3<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		signer, err := sigverify.SigV4(r, body, "eks", "eu-west-1", func(id string) (aws.Credentials, bool) { c, ok := accessKeys[id]; return c, ok }, time.Now())
		if err != nil {
			http.Error(w, "signature rejected: "+err.Error(), http.StatusUnauthorized)
			return
		}
		r.Header.Set("X-Verified-Signer", users[signer])
		forward.ServeHTTP(w, r)
	}))
	front.EnableHTTP2 = true
	front.StartTLS()
	t.Cleanup(front.Close)
	return front
}

// TestExecProxySign signs requests with SigV4 (credentials from a shared credentials file)
// in kplug's exec proxy; a verifying front passes them to the real apiserver as the
// signer's user. Missing AWS credentials and an unsupported signing key fail at start
// with one message.
func TestExecProxySign(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	dir := t.TempDir()
	kplug := buildKplug(t, dir)
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	// Only what the kubeconfig sets reaches the plugin's AWS configuration; no instance role.
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "no-aws-config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "no-aws-credentials"))

	creds := aws.Credentials{AccessKeyID: "AKIDKPLUGE2E", SecretAccessKey: "e2e-secret-key", SessionToken: "e2e-session"}
	credFile := filepath.Join(dir, "aws-credentials")
	writeBytes(t, credFile, []byte("[kplug]\naws_access_key_id = "+creds.AccessKeyID+"\naws_secret_access_key = "+creds.SecretAccessKey+"\naws_session_token = "+creds.SessionToken+"\n"))
	_, weak, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	weakFile := filepath.Join(dir, "sign.key")
	writeBytes(t, weakFile, pkcs8PEM(t, weak))

	front := signingFront(t, cp, map[string]aws.Credentials{creds.AccessKeyID: creds}, map[string]string{creds.AccessKeyID: "sigv4-user"})
	sigv4Env := []clientcmdapi.ExecEnvVar{{Name: "AWS_SHARED_CREDENTIALS_FILE", Value: credFile}, {Name: "AWS_PROFILE", Value: "kplug"}}
	kubeconfig := frontKubeconfig(t, front.URL, front.Certificate(), dir, map[string]*clientcmdapi.ExecConfig{
		"sigv4":         proxyExec(kplug, sigv4Env, "--sign", "sigv4", "--sigv4-service", "eks", "--sigv4-region", "eu-west-1"),
		"no-aws-creds":  proxyExec(kplug, nil, "--sign", "sigv4", "--sigv4-service", "eks", "--sigv4-region", "eu-west-1"),
		"no-audience":   proxyExec(kplug, nil, "--sign", "rfc9421", "--sign-key", weakFile, "--sign-key-id", "k"),
		"unsigned":      proxyExec(kplug, nil),
		"no-sigv4-zone": proxyExec(kplug, sigv4Env, "--sign", "sigv4", "--sigv4-service", "eks"),
	})

	for context, user := range map[string]string{"sigv4": "sigv4-user"} {
		// A POST with a body (hashed and signed) and a GET with a query.
		out, errOut, err := run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", context,
			"/apis/authentication.k8s.io/v1/selfsubjectreviews", "-d", selfSubjectReview)
		if err != nil || !strings.Contains(out, `"username":"`+user+`"`) {
			t.Errorf("%s: %q, %v\n%s", context, out, err, errOut)
		}
		out, errOut, err = run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", context, "/api/v1/namespaces/default/configmaps?limit=1")
		if err == nil || !strings.Contains(out+errOut, `User \"`+user+`\" cannot list resource \"configmaps\"`) && !strings.Contains(out+errOut, `User "`+user+`" cannot list resource "configmaps"`) {
			t.Errorf("%s: listing as %s: %q, %v\n%s", context, user, out, err, errOut)
		}
	}
	if out, errOut, err := run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", "unsigned", "/version"); err == nil || !strings.Contains(out+errOut, "signature rejected") {
		t.Errorf("an unsigned request passed the front: %q, %v\n%s", out, err, errOut)
	}

	for context, want := range map[string]string{
		"no-aws-creds":  "sigv4: no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE",
		"no-audience":   "--sign rfc9421 needs --sign-audience, the X-K8s-Audience value naming the cluster",
		"no-sigv4-zone": "sigv4: no region: pass --sigv4-region or set AWS_REGION",
	} {
		out, errOut, err := run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", context, "/version")
		if exitCode(err) == 0 || !strings.Contains(errOut, want) || strings.Contains(errOut, creds.SecretAccessKey) {
			t.Errorf("%s: exit %d, stdout %q, stderr:\n%s\nwant the message %q", context, exitCode(err), out, errOut, want)
		}
	}
	waitNoSockets(t, filepath.Join(dir, "run", "kplug"), 5*time.Second)
}

func proxyExec(kplug string, env []clientcmdapi.ExecEnvVar, args ...string) *clientcmdapi.ExecConfig {
	return &clientcmdapi.ExecConfig{
		APIVersion:         execcred.V1,
		Command:            kplug,
		Args:               append([]string{"proxy-plugin"}, args...),
		Env:                env,
		ProvideClusterInfo: true,
		InteractiveMode:    clientcmdapi.NeverExecInteractiveMode,
	}
}

// frontKubeconfig writes a kubeconfig whose cluster is a verifying front at server
// (serving ca's certificate), with one context per user.
func frontKubeconfig(t *testing.T, server string, ca *x509.Certificate, dir string, users map[string]*clientcmdapi.ExecConfig) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = server
	cluster.CertificateAuthorityData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	cfg.Clusters["front"] = cluster
	for name, exec := range users {
		auth := clientcmdapi.NewAuthInfo()
		auth.Exec = exec
		cfg.AuthInfos[name] = auth
		ctx := clientcmdapi.NewContext()
		ctx.Cluster, ctx.AuthInfo = "front", name
		cfg.Contexts[name] = ctx
	}
	path := filepath.Join(dir, "kubeconfig-front")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func pkcs8PEM(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
