package interop

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/httpsig"
)

// requireEnv, when set (make test, CI), turns a missing node or npm module into a failure.
const requireEnv = "KPLUG_E2E_REQUIRED"

const audience = "https://cluster.example"

// nodeJob runs rfc9421/interop.js on job and decodes its answer into out.
type nodeRunner func(t *testing.T, job map[string]any, out any)

func findNode(t *testing.T) nodeRunner {
	t.Helper()
	modules, _ := filepath.Abs(filepath.Join("..", "..", "_output", "node", "rfc9421", "node_modules"))
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(modules, "http-message-signatures"))
	}
	if err != nil {
		msg := "the RFC 9421 interop check needs node and the pinned http-message-signatures: run `make deps tools`: " + err.Error()
		if os.Getenv(requireEnv) != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return func(t *testing.T, job map[string]any, out any) {
		t.Helper()
		in, err := json.Marshal(job)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, filepath.Join("rfc9421", "interop.js"))
		cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("node: %v: %s", err, stderr.String())
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("node answered %q: %v", b, err)
		}
	}
}

type testKey struct {
	alg  string
	priv crypto.Signer
	// hmac, for alg hmac-sha256, is the job's "hmac" for interop.js in place of priv: the
	// secret, and for a SigV4-derived key what node folds it with.
	hmac map[string]any
}

func testKeys(t *testing.T) []testKey {
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return []testKey{{alg: "ecdsa-p256-sha256", priv: p256}, {alg: "ecdsa-p384-sha384", priv: p384}, {alg: "ed25519", priv: ed}, {alg: "rsa-pss-sha512", priv: rk}}
}

func publicPEM(t *testing.T, k crypto.Signer) string {
	der, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func privatePEM(t *testing.T, k crypto.Signer) string {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

var requests = []struct {
	name, method, target, body string
}{
	{"GET with a query", http.MethodGet, "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb&limit=500", ""},
	{"POST with a body", http.MethodPost, "/api/v1/namespaces/default/configmaps?dryRun=All", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"}}`},
}

// TestKplugSignatureVerifiesInNode: http-message-signatures accepts what httpsig.Signer
// produces, and refuses it once the path is changed.
func TestKplugSignatureVerifiesInNode(t *testing.T) {
	run := findNode(t)
	for _, k := range testKeys(t) {
		for _, r := range requests {
			t.Run(k.alg+"/"+r.name, func(t *testing.T) {
				s, err := httpsig.NewSigner(httpsig.SignerOptions{
					Key:     httpsig.Key{Signer: k.priv, KeyID: "interop-key"},
					Headers: map[string]string{httpsig.AudienceHeader: audience},
				})
				if err != nil {
					t.Fatal(err)
				}
				url := "https://Cluster.Example:443" + r.target
				var body io.Reader
				if r.body != "" {
					body = strings.NewReader(r.body)
				}
				req, _ := http.NewRequest(r.method, url, body)
				req.Header.Set("User-Agent", "kubectl/v1.36.3 (linux/amd64)")
				req.Header.Set("Accept", "application/json, */*")
				if r.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				if err := s.Sign(req); err != nil {
					t.Fatal(err)
				}
				headers := map[string][]string{}
				for name, vs := range req.Header {
					headers[strings.ToLower(name)] = vs
				}
				if r.body != "" && !strings.Contains(req.Header.Get("Signature-Input"), `"content-digest"`) {
					t.Fatalf("content-digest not covered: %s", req.Header.Get("Signature-Input"))
				}
				for _, tc := range []struct {
					url  string
					want bool
				}{{url, true}, {strings.Replace(url, "/namespaces/default/", "/namespaces/kube-system/", 1), false}} {
					var out struct {
						Verified bool
						Params   map[string]any
						Error    string
					}
					run(t, map[string]any{"op": "verify", "alg": k.alg, "key": publicPEM(t, k.priv),
						"request": map[string]any{"method": r.method, "url": tc.url, "headers": headers}}, &out)
					if out.Verified != tc.want || out.Error != "" {
						t.Errorf("%s: node verified=%v error=%q, want verified=%v", tc.url, out.Verified, out.Error, tc.want)
					}
					if tc.want && (out.Params["keyid"] != "interop-key" || out.Params["tag"] != httpsig.Tag || out.Params["alg"] != k.alg) {
						t.Errorf("node read parameters %v", out.Params)
					}
				}
			})
		}
	}
}

// TestNodeSignatureVerifiesInKplug: httpsig.Verify, behind a real HTTP server, accepts a
// request http-message-signatures signed with the KEP-6308 parameters.
func TestNodeSignatureVerifiesInKplug(t *testing.T) {
	run := findNode(t)
	var key crypto.PublicKey
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := httpsig.Policy{RequiredHeaders: map[string][]string{httpsig.AudienceHeader: {audience}}}
		sig, err := httpsig.Verify(r, p, func(*httpsig.Signature) (any, error) { return key, nil })
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, sig.KeyID)
	}))
	defer srv.Close()
	for _, k := range testKeys(t) {
		for _, r := range requests {
			t.Run(k.alg+"/"+r.name, func(t *testing.T) {
				key = k.priv.Public()
				status, answer := nodeSignedRequest(t, run, srv.URL, k, r.method, r.target, r.body, false)
				if status != http.StatusOK || answer != "node-key" {
					t.Errorf("got %d %q, want 200 node-key", status, answer)
				}
			})
		}
	}
	// The library's own rsa-pss-sha512 signer uses OpenSSL's maximum salt length rather
	// than RFC 9421 §3.3.1's 64 bytes, and httpsig verifies with 64 as the RFC says.
	t.Run("library rsa-pss signer with the wrong salt length", func(t *testing.T) {
		k := testKeys(t)[3]
		key = k.priv.Public()
		status, answer := nodeSignedRequest(t, run, srv.URL, k, http.MethodGet, "/api", "", true)
		if status != http.StatusUnauthorized || !strings.Contains(answer, "signature does not verify") {
			t.Errorf("got %d %q, want 401: signature does not verify", status, answer)
		}
	})
}

// nodeSignedRequest has node sign a request to base+target and sends it.
func nodeSignedRequest(t *testing.T, run nodeRunner, base string, k testKey, method, target, body string, librarySigner bool) (int, string) {
	t.Helper()
	headers := nodeSign(t, run, base, k, method, target, body, "", librarySigner)
	return send(t, method, base+target, body, headers)
}

// send sends a request with headers and returns the answer's status and body.
func send(t *testing.T, method, url, body string, headers map[string]string) (int, string) {
	t.Helper()
	var rb io.Reader
	if body != "" {
		rb = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rb)
	for name, v := range headers {
		req.Header.Set(name, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// nodeSign has node sign a request to base+target with the KEP-6308 parameters and
// returns its headers: under the key ID "node-key" (a SigV4-derived HMAC key: under the
// key ID node makes, its credential scope), or, with certificate (PEM), in the
// certificate form, the keyid and Signature-Certificate made by node from the certificate.
func nodeSign(t *testing.T, run nodeRunner, base string, k testKey, method, target, body, certificate string, librarySigner bool) map[string]string {
	t.Helper()
	headers := map[string]string{
		"User-Agent":           "node-interop/1",
		httpsig.AudienceHeader: audience,
	}
	fields := []string{"@method", "@authority", "@path", "@query", "user-agent", "x-k8s-audience"}
	if body != "" {
		headers["Content-Type"] = "application/json"
		fields = append(fields, "content-type", "content-digest")
	}
	wantKeyID := `;tag="kubernetes";keyid="node-key"`
	if sigv4, ok := k.hmac["sigv4"].(map[string]any); ok {
		wantKeyID = `;tag="kubernetes";keyid="` + sigv4["name"].(string) + "/"
	}
	if certificate != "" {
		fields = append(fields, "signature-certificate")
		wantKeyID = `;tag="kubernetes";keyid="x509-sha256:`
	}
	var out struct {
		Headers map[string]string
		Error   string
	}
	job := map[string]any{"op": "sign", "alg": k.alg, "keyid": "node-key",
		"certificate": certificate, "fields": fields, "librarySigner": librarySigner,
		"request": map[string]any{"method": method, "url": base + target, "headers": headers, "body": body}}
	if k.hmac != nil {
		job["hmac"] = k.hmac
	} else {
		job["key"] = privatePEM(t, k.priv)
	}
	run(t, job, &out)
	if out.Error != "" {
		t.Fatalf("node could not sign: %s", out.Error)
	}
	if !strings.Contains(out.Headers["Signature-Input"], wantKeyID) {
		t.Fatalf("node's Signature-Input %q, want %s...", out.Headers["Signature-Input"], wantKeyID)
	}
	return out.Headers
}
