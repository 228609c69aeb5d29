package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/test/e2e/framework"
)

const signatureAudience = "https://kplug-e2e.example"

// signatureProxyConfig trusts caFile for signatures no older than two seconds (plus one
// of skew) and maps a certificate to sig:<CN> in its organizations.
func signatureProxyConfig(caFile string) string {
	return `apiVersion: apiserver.config.k8s.io/v1alpha1
kind: AuthenticationConfiguration
httpSignature:
  requiredSignedHeaders:
    X-K8s-Audience: [` + signatureAudience + `]
  maxClockSkew: 1s
  authenticators:
  - name: e2e-signers
    maxAge: 2s
    x509:
      certificateAuthorityFile: ` + caFile + `
      claimMappings:
        username:
          expression: '"sig:" + cert.subject.commonName'
        groups:
          expression: cert.subject.organization
    userValidationRules:
    - expression: '!user.username.startsWith("system:") && !user.groups.exists(g, g.startsWith("system:"))'
      message: 'this authenticator may not assert an identity under the system: prefix'
`
}

// startSignatureProxy runs `kplug signature-proxy` in front of apiserver 0, as a cluster
// without the feature would: the proxy holds the front-proxy client certificate, and may
// read which identity headers kube-apiserver reads (docs/signature-proxy-rbac.yaml). It
// returns once the proxy forwards.
func startSignatureProxy(t *testing.T, cp *framework.ControlPlane, caFile string, flags ...string) *sidecar {
	t.Helper()
	grantSignatureProxy(t, cp)
	s := startSignatureProxyUngranted(t, cp, caFile, flags...)
	poll.Until(t, "signature-proxy to check the request-header names", func() bool { return strings.Contains(s.log.String(), signatureProxyForwarding) })
	return s
}

// signatureProxyForwarding is what signature-proxy logs once it may forward.
const signatureProxyForwarding = "checked the identity headers kube-apiserver reads: forwarding"

// grantSignatureProxy lets signature-proxy read the request-header names, applying
// docs/signature-proxy-rbac.yaml as an administrator would.
func grantSignatureProxy(t *testing.T, cp *framework.ControlPlane) {
	t.Helper()
	rbac := filepath.Join(moduleRoot(t), "docs", "signature-proxy-rbac.yaml")
	if out, err := cp.Kubectl(t.Context(), cp.Admin, "apply", "-f", rbac).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -f %s: %v\n%s", rbac, err, out)
	}
}

// startSignatureProxyUngranted is startSignatureProxy without the RBAC and without waiting
// for the proxy to forward; flags are added to the command line.
func startSignatureProxyUngranted(t *testing.T, cp *framework.ControlPlane, caFile string, flags ...string) *sidecar {
	t.Helper()
	return startSignatureProxyConfig(t, cp, signatureProxyConfig(caFile), flags...)
}

// startSignatureProxyConfig is startSignatureProxyUngranted with the authentication
// configuration authn.
func startSignatureProxyConfig(t *testing.T, cp *framework.ControlPlane, authn string, flags ...string) *sidecar {
	t.Helper()
	config := filepath.Join(t.TempDir(), "authn.yaml")
	if err := os.WriteFile(config, []byte(authn), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := cp.PKI
	s := runInProcess(t, "signature-proxy", append([]string{"signature-proxy", "-v=4",
		"--authentication-config=" + config, "--apiserver=" + cp.Servers[0].URL, "--apiserver-ca-file=" + p.ClusterCA.File,
		"--proxy-client-cert-file=" + p.ProxyClient.CertFile, "--proxy-client-key-file=" + p.ProxyClient.KeyFile,
		"--tls-cert-file=" + p.Serving.CertFile, "--tls-private-key-file=" + p.Serving.KeyFile,
		"--listen-address=" + addr, "--metrics-addr=" + metricsAddr,
	}, flags...), "https://"+addr, "http://"+metricsAddr+"/metrics")
	poll.Until(t, "signature-proxy to listen", func() bool {
		c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return s
}

// newSigningIdentity makes the control plane's signing CA (which startSignatureProxy is
// given) and an ECDSA P-256 key with a certificate for cn in the group "signers".
func newSigningIdentity(t testing.TB, cp *framework.ControlPlane, cn string) (ca *testpki.CA, key *ecdsa.PrivateKey, certFile string) {
	t.Helper()
	ca, err := cp.PKI.NewCA("signing-ca", "kplug-e2e signing CA")
	if err != nil {
		t.Fatal(err)
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	certFile, err = ca.IssueFor(cn, &x509.Certificate{Subject: pkix.Name{CommonName: cn, Organization: []string{"signers"}}}, key.Public(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca, key, certFile
}

// sent is a signed request as it left the client, for a replay.
type sent struct {
	method, url string
	header      http.Header
	body        []byte
}

// signingClient signs with key and cert, then lets tamper change the request, records it
// in *last, and sends it trusting roots.
func signingClient(t *testing.T, key *ecdsa.PrivateKey, cert *x509.Certificate, roots *x509.CertPool, tamper func(*http.Request), last *sent) *http.Client {
	t.Helper()
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     httpsig.Key{Signer: key, Certificate: cert},
		Headers: map[string]string{httpsig.AudienceHeader: signatureAudience},
	})
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	t.Cleanup(base.CloseIdleConnections)
	return &http.Client{Transport: signer.RoundTripper(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if tamper != nil {
			tamper(r)
		}
		if last != nil {
			var body []byte
			if r.Body != nil {
				body, _ = io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			*last = sent{method: r.Method, url: r.URL.String(), header: r.Header.Clone(), body: body}
		}
		return base.RoundTrip(r)
	}))}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

const selfSubjectReviewPath = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

// whoami posts a SelfSubjectReview (what `kubectl auth whoami` does) and returns the
// status code and either the user or the Status message.
func whoami(t *testing.T, c *http.Client, base string, header http.Header) (int, authenticationv1.UserInfo, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+selfSubjectReviewPath, strings.NewReader(selfSubjectReview))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return decodeReview(t, resp)
}

func decodeReview(t *testing.T, resp *http.Response) (int, authenticationv1.UserInfo, string) {
	t.Helper()
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		var s metav1.Status
		if err := json.Unmarshal(body, &s); err != nil || s.Kind != "Status" {
			t.Errorf("%d answer is not a Status: %s", resp.StatusCode, body)
		}
		return resp.StatusCode, authenticationv1.UserInfo{}, s.Message
	}
	var review authenticationv1.SelfSubjectReview
	if err := json.Unmarshal(body, &review); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, review.Status.UserInfo, ""
}

// TestSignatureProxy: kplug signature-proxy in front of a real kube-apiserver, which
// trusts it through its requestheader flags. A request signed under a certificate from a
// dedicated signing CA is served as the mapped user; tampering, an added impersonation
// header, a replay after maxAge and a bearer token alone are 401; a bearer token sent
// beside a valid signature is dropped.
func TestSignatureProxy(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{}}})
	signingCA, key, certFile := newSigningIdentity(t, cp, "carol")
	cert := readCertificate(t, certFile)
	proxy := startSignatureProxy(t, cp, signingCA.File)
	roots := cp.PKI.ClusterCA.Pool()
	wantUser := authenticationv1.UserInfo{Username: "sig:carol", Groups: []string{"signers", "system:authenticated"}}

	t.Run("signed", func(t *testing.T) {
		code, user, msg := whoami(t, signingClient(t, key, cert, roots, nil, nil), proxy.URL, nil)
		if code != http.StatusCreated || user.Username != wantUser.Username || !slices.Equal(user.Groups, wantUser.Groups) {
			t.Errorf("%d %+v %s; want %+v", code, user, msg, wantUser)
		}
	})
	t.Run("bearer token beside a signature is dropped", func(t *testing.T) {
		code, user, msg := whoami(t, signingClient(t, key, cert, roots, nil, nil), proxy.URL, http.Header{"Authorization": {"Bearer " + cp.TokenUser.Token}})
		if code != http.StatusCreated || user.Username != wantUser.Username || user.UID != "" {
			t.Errorf("%d %+v %s; want %s", code, user, msg, wantUser.Username)
		}
	})
	// Each is refused for its own reason, which the 401 names (the texts httpsig's unit
	// tests pin; only the stable part of each is checked here).
	refused := []struct {
		name   string
		tamper func(*http.Request)
		reason string
	}{
		{"tampered path", func(r *http.Request) { r.URL.Path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" },
			"signature does not verify"},
		{"tampered body", func(r *http.Request) {
			b := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","metadata":{"name":"x"}}`)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		}, "Content-Digest sha-256 does not match the body"},
		{"added impersonation", func(r *http.Request) { r.Header.Set("Impersonate-User", "kplug-admin") },
			"the request has Impersonate-User, which the signature does not cover"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			code, _, msg := whoami(t, signingClient(t, key, cert, roots, tc.tamper, nil), proxy.URL, nil)
			if code != http.StatusUnauthorized || !strings.HasPrefix(msg, "Unauthorized: ") || !strings.Contains(msg, tc.reason) {
				t.Errorf("%d %q; want 401 Unauthorized: ...%s", code, msg, tc.reason)
			}
		})
	}
	t.Run("bearer token alone", func(t *testing.T) {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
		code, _, msg := whoami(t, c, proxy.URL, http.Header{"Authorization": {"Bearer " + cp.TokenUser.Token}})
		if code != http.StatusUnauthorized || !strings.Contains(msg, "the request is not signed") || strings.Contains(msg, cp.TokenUser.Token) {
			t.Errorf("%d %q", code, msg)
		}
	})
	t.Run("replay after maxAge", func(t *testing.T) {
		var last sent
		if code, _, msg := whoami(t, signingClient(t, key, cert, roots, nil, &last), proxy.URL, nil); code != http.StatusCreated {
			t.Fatalf("first send: %d %s", code, msg)
		}
		time.Sleep(3500 * time.Millisecond) // past maxAge 2s plus maxClockSkew 1s
		req, _ := http.NewRequestWithContext(t.Context(), last.method, last.url, bytes.NewReader(last.body))
		req.Header = last.header.Clone()
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		const reason = "ago, more than maxAge 2s plus maxClockSkew 1s" // after "created <age>"
		if code, _, msg := decodeReview(t, resp); code != http.StatusUnauthorized || !strings.HasPrefix(msg, "Unauthorized: ") || !strings.Contains(msg, reason) {
			t.Errorf("replay: %d %q; want 401 Unauthorized: ...%s", code, msg, reason)
		}
	})
}

func readCertificate(t testing.TB, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSignatureProxyInProcess: `kplug request` signs in-process (KEP-6308 client side,
// no proxy) from a kubeconfig httpSignature block, with key files and with signing
// material from an exec plugin, and a real kube-apiserver behind kplug signature-proxy
// serves the request as the certificate's user. The plugin's key never reaches kplug's
// output.
func TestSignatureProxyInProcess(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{}}})
	dir := t.TempDir()
	buildBinary(t, filepath.Join(dir, "bin"), "./test/e2e/testplugin", "testplugin")
	kplug := buildBinary(t, dir, "./cmd/kplug", "kplug")
	signingCA, key, certFile := newSigningIdentity(t, cp, "dave")
	keyPEM := pkcs8PEM(t, key)
	keyFile := filepath.Join(dir, "dave.key")
	writeBytes(t, keyFile, keyPEM)
	proxy := startSignatureProxy(t, cp, signingCA.File)

	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeBytes(t, kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: verifier
  cluster:
    server: `+proxy.URL+`
    certificate-authority: `+cp.PKI.ClusterCA.File+`
users:
- name: files
  user:
    httpSignature:
      apiVersion: client.authentication.k8s.io/v1alpha1
      certFile: `+certFile+`
      keyFile: `+keyFile+`
      signedHeaders:
      - name: X-K8s-Audience
        value: `+signatureAudience+`
- name: plugin
  user:
    httpSignature:
      apiVersion: client.authentication.k8s.io/v1alpha1
      signedHeaders:
      - name: X-K8s-Audience
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: `+filepath.Join(dir, "bin", "testplugin")+`
      interactiveMode: Never
      env:
      - {name: TEST_SIGN_KEY_FILE, value: `+keyFile+`}
      - {name: TEST_SIGN_CERT_FILE, value: `+certFile+`}
      - {name: TEST_SIGN_AUDIENCE, value: `+signatureAudience+`}
contexts:
- name: files
  context: {cluster: verifier, user: files}
- name: plugin
  context: {cluster: verifier, user: plugin}
current-context: files
`))
	keyBase64 := strings.Join(strings.Split(strings.TrimSpace(string(keyPEM)), "\n")[1:2], "")
	for _, context := range []string{"files", "plugin"} {
		t.Run(context, func(t *testing.T) {
			out, errOut, err := run(t, kplug, "request", "-v=10", "--kubeconfig", kubeconfig, "--context", context, selfSubjectReviewPath, "-d", selfSubjectReview)
			if err != nil || !strings.Contains(out, `"username":"sig:dave"`) || !strings.Contains(out, `"signers"`) {
				t.Errorf("kplug request: %q, %v\n%s", out, err, errOut)
			}
			// A body was sent, so it was digested and covered; and no key bytes in any output.
			if strings.Contains(out+errOut, keyBase64) {
				t.Errorf("the signing key appears in kplug's output")
			}
			out, errOut, err = run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", context, "-X", "POST",
				"/api/v1/namespaces/default/configmaps", "-d", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"signed-`+context+`"},"data":{"k":"v"}}`)
			if err == nil || !strings.Contains(out+errOut, "forbidden") || !strings.Contains(out+errOut, "sig:dave") {
				t.Errorf("create as sig:dave without RBAC should reach authorization as sig:dave: %q %v\n%s", out, err, errOut)
			}
		})
	}
}
