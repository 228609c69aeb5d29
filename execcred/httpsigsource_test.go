package execcred

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/httpsigtest"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

const testAudience = "https://k.example"

// getAndPost sends a GET and a POST with a body through rt and fails unless both are
// accepted.
func getAndPost(t *testing.T, rt http.RoundTripper, url string) {
	t.Helper()
	for _, m := range []struct{ method, body string }{{http.MethodGet, ""}, {http.MethodPost, `{"kind":"SelfSubjectReview"}`}} {
		var body io.Reader
		if m.body != "" {
			body = strings.NewReader(m.body)
		}
		req, err := http.NewRequestWithContext(t.Context(), m.method, url+"/api/v1/namespaces?limit=1", body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", m.method, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s", m.method, resp.Status)
		}
	}
}

// signingTransport is HTTPTransport for cfg, signing with h's material.
func signingTransport(t *testing.T, cfg *rest.Config, h *HTTPSignature, o Options) http.RoundTripper {
	t.Helper()
	src, err := newHTTPSignatureSource(cfg, h, o)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := HTTPTransport(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// signingPlugin is a fake exec plugin, configured in a rest.Config for server, that
// answers with out.
func signingPlugin(t *testing.T, server, out string) (*exectest.Plugin, *rest.Config) {
	t.Helper()
	p := exectest.New(t).Stdout(out)
	var env []clientcmdapi.ExecEnvVar
	for _, kv := range p.Env() {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, clientcmdapi.ExecEnvVar{Name: name, Value: value})
	}
	return p, &rest.Config{Host: server, ExecProvider: &clientcmdapi.ExecConfig{
		Command: p.Path(), Env: env, APIVersion: V1, InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}
}

// signingOutput is an ExecCredential carrying status.httpSignature h.
func signingOutput(t *testing.T, h map[string]any, expiry time.Time) string {
	t.Helper()
	status := map[string]any{"httpSignature": h}
	if !expiry.IsZero() {
		status["expirationTimestamp"] = expiry.UTC().Format(time.RFC3339)
	}
	b, err := json.Marshal(map[string]any{"apiVersion": V1, "kind": Kind, "status": status})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pluginBlock is an httpSignature block that leaves the key to the exec plugin.
func pluginBlock(headers ...string) *HTTPSignature {
	h := &HTTPSignature{APIVersion: HTTPSignatureAPIVersion}
	for _, name := range headers {
		h.SignedHeaders = append(h.SignedHeaders, SignedHeader{Name: name})
	}
	return h
}

func certKeyID(t *testing.T, certPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	sum := sha256.Sum256(block.Bytes)
	return httpsig.CertificateKeyIDPrefix + hex.EncodeToString(sum[:])
}

// TestHTTPSignaturePluginCertificate: a plugin that returns an ECDSA key and its
// certificate (kplug's extension) is asked for signing material with the configured
// headers and X-K8s-Audience, runs once, and every request (GET, POST with a body) is
// signed under the certificate's keyid and carries no bearer token.
func TestHTTPSignaturePluginCertificate(t *testing.T) {
	t.Parallel()
	srv := httpsigtest.New(t, testAudience, nil)
	kp, err := testpki.NewTestCA(t, "httpsig-ca").IssueClient("signer", "alice")
	if err != nil {
		t.Fatal(err)
	}
	out := signingOutput(t, map[string]any{
		"privateKey": string(kp.KeyPEM), "certificate": string(kp.CertPEM),
		"signedHeaders": map[string]string{httpsig.AudienceHeader: testAudience, "X-Session": "s"},
	}, time.Time{})
	p, cfg := signingPlugin(t, srv.URL, out)
	rt := signingTransport(t, cfg, pluginBlock("X-Session"), Options{Plugin: quietHost()})
	getAndPost(t, rt, srv.URL)
	getAndPost(t, rt, srv.URL)

	want := certKeyID(t, kp.CertPEM)
	for _, r := range srv.Requests() {
		if r.Err != "" || r.KeyID != want || r.Authorization != "" {
			t.Errorf("%s %s: keyid %q, Authorization %q, refused: %s", r.Method, r.Path, r.KeyID, r.Authorization, r.Err)
		}
	}
	if n := len(srv.Requests()); n != 4 || p.Runs() != 1 {
		t.Errorf("%d requests after %d plugin runs, want 4 after 1", n, p.Runs())
	}
	wantSpec := `"httpSignature":{"signedHeaders":[{"name":"X-Session"},{"name":"X-K8s-Audience"}]}`
	if info := infos(p); len(info) != 1 || !strings.Contains(info[0], wantSpec) {
		t.Errorf("KUBERNETES_EXEC_INFO %q, want it to hold %s", info, wantSpec)
	}
}

// TestHTTPSignaturePluginKeyRotates: a key named by keyID, which expires: the plugin runs
// again after expirationTimestamp, and the requests are signed with the new key.
func TestHTTPSignaturePluginKeyRotates(t *testing.T) {
	t.Parallel()
	clk := newClock()
	keys := map[string]any{}
	var outputs []string
	for i, id := range []string{"key-1", "key-2"} {
		key, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		keys[id] = key.Public()
		outputs = append(outputs, signingOutput(t, map[string]any{
			"keyID": id, "algorithm": "ecdsa-p384-sha384", "privateKey": string(testpki.PEM("PRIVATE KEY", der)),
			"signedHeaders": map[string]string{httpsig.AudienceHeader: testAudience},
		}, clk.Now().Add(time.Duration(i+1)*time.Hour)))
	}
	srv := httpsigtest.New(t, testAudience, keys)
	p, cfg := signingPlugin(t, srv.URL, outputs[0])
	rt := signingTransport(t, cfg, pluginBlock(), Options{Plugin: quietHost(), RefreshBefore: -1, Now: clk.Now})
	getAndPost(t, rt, srv.URL)
	p.Stdout(outputs[1])
	clk.Add(time.Hour + time.Second)
	getAndPost(t, rt, srv.URL)
	var got []string
	for _, r := range srv.Requests() {
		got = append(got, r.KeyID)
	}
	if strings.Join(got, " ") != "key-1 key-1 key-2 key-2" || p.Runs() != 2 {
		t.Errorf("key IDs %q after %d runs, want key-1 twice then key-2 twice after 2", got, p.Runs())
	}
}

// TestHTTPSignaturePluginHMAC: a plain secret with a keyID is an hmac-sha256 key.
func TestHTTPSignaturePluginHMAC(t *testing.T) {
	t.Parallel()
	srv := httpsigtest.New(t, testAudience, map[string]any{"hmac-1": []byte("0123456789abcdef0123456789abcdef")})
	_, cfg := signingPlugin(t, srv.URL, signingOutput(t, map[string]any{
		"keyID": "hmac-1", "secret": "0123456789abcdef0123456789abcdef",
		"signedHeaders": map[string]string{httpsig.AudienceHeader: testAudience},
	}, time.Time{}))
	rt := signingTransport(t, cfg, pluginBlock(), Options{Plugin: quietHost()})
	getAndPost(t, rt, srv.URL)
}

// TestHTTPSignaturePluginErrors: answers a signing client cannot use are refused with a
// message naming what is missing, and quoting no key material.
func TestHTTPSignaturePluginErrors(t *testing.T) {
	t.Parallel()
	kp, err := testpki.NewTestCA(t, "httpsig-ca").IssueClient("signer", "alice")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testpki.NewTestCA(t, "httpsig-ca-2").IssueClient("other", "bob")
	if err != nil {
		t.Fatal(err)
	}
	key := string(kp.KeyPEM)
	audience := map[string]string{httpsig.AudienceHeader: testAudience}
	for _, tc := range []struct {
		name    string
		out     string
		headers []string
		err     string
	}{
		{"a token", tokenOutput(V1, "tok", time.Time{}), nil,
			"the kubeconfig user has httpSignature, so the plugin must return signing material in status.httpSignature (KEP-6308), not a token or client certificate"},
		{"no audience", signingOutput(t, map[string]any{"keyID": "k", "privateKey": key}, time.Time{}), nil,
			`exec plugin's httpSignature has no value for the signed header X-K8s-Audience, which every signature carries against cross-cluster replay (KEP-6308 "Required signed headers"): ` + pluginAudienceHint},
		{"a requested header missing", signingOutput(t, map[string]any{"keyID": "k", "privateKey": key, "signedHeaders": audience}, time.Time{}), []string{"X-Session"},
			"the plugin returned no value for the signed header X-Session, which the kubeconfig's httpSignature.signedHeaders names: it must return it in status.httpSignature.signedHeaders"},
		{"another key's certificate", signingOutput(t, map[string]any{"privateKey": key, "certificate": string(other.CertPEM), "signedHeaders": audience}, time.Time{}), nil,
			`exec plugin's httpSignature.certificate: the certificate (subject "CN=bob") is not for the private key`},
		{"the wrong algorithm", signingOutput(t, map[string]any{"keyID": "k", "algorithm": "ed25519", "privateKey": key, "signedHeaders": audience}, time.Time{}), nil,
			`exec plugin's httpSignature: algorithm "ed25519" does not fit the key, which signs with ecdsa-p256-sha256`},
		{"a garbled key", signingOutput(t, map[string]any{"keyID": "k", "privateKey": "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n", "signedHeaders": audience}, time.Time{}), nil,
			"exec plugin's httpSignature.privateKey: parsing PRIVATE KEY: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, cfg := signingPlugin(t, "https://k.example", tc.out)
			src, err := newHTTPSignatureSource(cfg, pluginBlock(tc.headers...), Options{Plugin: quietHost()})
			if err != nil {
				t.Fatal(err)
			}
			_, err = src.Credential(t.Context(), nil)
			want := `execcred: plugin "` + p.Path() + `": ` + tc.err
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error:\n got %v\nwant %s", err, want)
			}
			if err != nil && (strings.Contains(err.Error(), "c2VjcmV0") || strings.Contains(err.Error(), "PRIVATE KEY-----")) {
				t.Errorf("the error quotes key material: %v", err)
			}
		})
	}
}

// TestHTTPSignatureKeyFiles: certFile and keyFile, or one credentialBundleFile, sign each
// request under the certificate's keyid, with the kubeconfig's header values.
func TestHTTPSignatureKeyFiles(t *testing.T) {
	t.Parallel()
	srv := httpsigtest.New(t, testAudience, nil)
	kp, err := testpki.NewTestCA(t, "httpsig-ca").IssueClient("signer", "alice")
	if err != nil {
		t.Fatal(err)
	}
	bundle := writeFile(t, t.TempDir(), "bundle.pem", string(kp.CertPEM)+string(kp.KeyPEM))
	headers := []SignedHeader{{Name: httpsig.AudienceHeader, Value: testAudience}}
	for _, h := range []*HTTPSignature{
		{APIVersion: HTTPSignatureAPIVersion, CertFile: kp.CertFile, KeyFile: kp.KeyFile, SignedHeaders: headers},
		{APIVersion: HTTPSignatureAPIVersion, CredentialBundleFile: bundle, SignedHeaders: headers},
	} {
		cfg := &rest.Config{Host: srv.URL}
		getAndPost(t, signingTransport(t, cfg, h, Options{}), srv.URL)
	}
	want := certKeyID(t, kp.CertPEM)
	for _, r := range srv.Requests() {
		if r.Err != "" || r.KeyID != want {
			t.Errorf("%s: keyid %q, refused: %s", r.Method, r.KeyID, r.Err)
		}
	}
}

// TestHTTPSignatureSourceConfigErrors: what newHTTPSignatureSource refuses before any
// key is read or plugin run.
func TestHTTPSignatureSourceConfigErrors(t *testing.T) {
	t.Parallel()
	files := &HTTPSignature{APIVersion: HTTPSignatureAPIVersion, CertFile: "c", KeyFile: "pkcs11:token=t;object=k",
		SignedHeaders: []SignedHeader{{Name: httpsig.AudienceHeader, Value: testAudience}}}
	_, execCfg := signingPlugin(t, "https://k.example", "")
	tpmFiles := *files
	tpmFiles.KeyFile = writeFile(t, t.TempDir(), "key.tss2", "-----BEGIN TSS2 PRIVATE KEY-----\nMAA=\n-----END TSS2 PRIVATE KEY-----\n")
	for _, tc := range []struct {
		name string
		cfg  *rest.Config
		h    *HTTPSignature
		err  string
	}{
		{"static token", &rest.Config{Host: "https://k", BearerToken: "t"}, files,
			"httpSignature: the user also has a token, basic auth or a client certificate: a signed request carries no other credential; remove them"},
		{"key files and a plugin", execCfg, files,
			"httpSignature: the user has key files and an exec plugin: the key comes from one of them; remove the other"},
		{"no key", &rest.Config{Host: "https://k"}, pluginBlock(),
			"httpSignature: no key: set certFile and keyFile, or credentialBundleFile, or give the user an exec plugin that returns signing material"},
		{"a key URI without an opener", &rest.Config{Host: "https://k"}, files,
			`httpSignature.keyFile "pkcs11:token=t;object=k": not a file, and this program opens PEM key files only`},
		{"a TPM key file without an opener", &rest.Config{Host: "https://k"}, &tpmFiles,
			`httpSignature.keyFile "` + tpmFiles.KeyFile + `": a TPM 2.0 key file, which signs in the TPM, and this program opens PEM key files only`},
	} {
		_, err := newHTTPSignatureSource(tc.cfg, tc.h, Options{})
		var ce *ConfigError
		if err == nil || err.Error() != tc.err || !errors.As(err, &ce) {
			t.Errorf("%s:\n got %v\nwant ConfigError %s", tc.name, err, tc.err)
		}
	}
}

// TestSigningNeverLogged: slog shows a Credential's signing material as its key ID,
// algorithm and header names: never the key, nor a header's value (a session token).
func TestSigningNeverLogged(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{Key: httpsig.Key{Signer: key, KeyID: "k"},
		Headers: map[string]string{httpsig.AudienceHeader: testAudience, "X-Session": "session-s3cr3t"}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Signing{Signer: signer, Headers: map[string]string{httpsig.AudienceHeader: testAudience, "X-Session": "session-s3cr3t"}}
	raw, err := key.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	d := new(big.Int).SetBytes(raw).String() // how fmt shows the private scalar
	var buf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&buf, nil), slog.NewJSONHandler(&buf, nil)} {
		slog.New(h).Info("credential", "signing", s, "cred", &Credential{HTTPSignature: s})
	}
	if out := buf.String(); strings.Contains(out, "session-s3cr3t") || strings.Contains(out, d) || !strings.Contains(out, "keyid=k") {
		t.Errorf("log %s", out)
	}
}

// TestLinksNoPKCS11: programs using execcred never link a PKCS#11 library (cgo) for
// httpSignature key files; kplug's CLI opens pkcs11: keys through Options.OpenKey.
func TestLinksNoPKCS11(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/kplug/kplug/execcred").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "crypto11") || strings.Contains(dep, "pkcs11") || dep == "github.com/kplug/kplug/keys" {
			t.Errorf("execcred links %s", dep)
		}
	}
}
