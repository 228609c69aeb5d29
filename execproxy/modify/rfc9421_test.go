package modify_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"net/http"
	"testing"
	"time"

	"github.com/kplug/kplug/execproxy/modify"
	"github.com/kplug/kplug/internal/sigverify"
)

// verifyHTTPSig checks a request with the public key alone, apart from the signer.
func verifyHTTPSig(pub crypto.PublicKey, label string, now time.Time) func(r *http.Request, body []byte) error {
	return func(r *http.Request, body []byte) error {
		_, err := sigverify.HTTPSig(r, body, label, func(string) (crypto.PublicKey, bool) { return pub, true }, now)
		return err
	}
}

func httpSigKeys(t *testing.T) map[string]crypto.Signer {
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]crypto.Signer{"ed25519": ed, "ecdsa-p256": ec}
}

func TestHTTPSigVerifiedWithThePublicKey(t *testing.T) {
	now := time.Now()
	for keyName, key := range httpSigKeys(t) {
		t.Run(keyName, func(t *testing.T) {
			sign, err := modify.NewHTTPSig(modify.HTTPSigOptions{Key: key, KeyID: "test-key", Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			srv := verifyingServer(t, verifyHTTPSig(key.Public(), "kplug", now))
			c := &http.Client{Transport: modifying{modify: sign, base: http.DefaultTransport}}
			for _, tt := range []struct {
				name, method, path, body string
				header                   http.Header
			}{
				{"get", "GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb", "", nil},
				{"create with impersonation", "POST", "/api/v1/namespaces/default/configmaps", `{"kind":"ConfigMap"}`,
					header("Content-Type", "application/json", "Impersonate-User", "alice", "Impersonate-Group", "a", "Impersonate-Group", "b")},
				{"watch", "GET", "/api/v1/pods?watch=true", "", nil},
				{"upgrade", "POST", "/api/v1/namespaces/default/pods/web/exec?command=sh", "",
					header("Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Protocol", "v5.channel.k8s.io")},
			} {
				got, err := send(t, c, tt.method, srv.URL+tt.path, tt.body, tt.header)
				if err != nil || got != "ok" {
					t.Errorf("%s: verifier: %q, %v", tt.name, got, err)
				}
			}
		})
	}
}

func TestHTTPSigTamperingIsRejected(t *testing.T) {
	now := time.Now()
	key := httpSigKeys(t)["ecdsa-p256"]
	srv := verifyingServer(t, verifyHTTPSig(key.Public(), "kplug", now))
	sign, err := modify.NewHTTPSig(modify.HTTPSigOptions{Key: key, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		tamper func(*http.Request)
		want   string
	}{
		{"impersonation added after signing", func(r *http.Request) { r.Header.Set("Impersonate-Group", "system:masters") },
			"impersonate-group is present but not covered"},
		{"impersonated user changed", func(r *http.Request) { r.Header.Set("Impersonate-User", "admin") }, "bad signature"},
		{"body changed", func(r *http.Request) { r.Body, r.GetBody = readCloser(`{"kind":"Secret!!!"}`), nil },
			"body does not match a covered content-digest"},
		{"body and digest changed", func(r *http.Request) {
			r.Body, r.GetBody = readCloser(`{"kind":"Secret!!!"}`), nil
			sum := sha256.Sum256([]byte(`{"kind":"Secret!!!"}`))
			r.Header.Set("Content-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":")
		}, "bad signature"},
		{"query changed", func(r *http.Request) { r.URL.RawQuery = "dryRun=All" }, "bad signature"},
		{"method changed", func(r *http.Request) { r.Method = http.MethodPut }, "bad signature"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &http.Client{Transport: modifying{modify: sign, tamper: tt.tamper, base: http.DefaultTransport}}
			got, err := send(t, c, "POST", srv.URL+"/api/v1/namespaces/default/configmaps", `{"kind":"ConfigMap"}`,
				header("Impersonate-User", "alice", "Content-Type", "application/json"))
			if err != nil || got != tt.want {
				t.Errorf("verifier: %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestHTTPSigRefusesUnsupportedKeys(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[crypto.Signer]string{
		rsaKey: "rfc9421: unsupported key type RSA 2048: want Ed25519 or ECDSA P-256",
		p384:   "rfc9421: unsupported key type ECDSA P-384: want Ed25519 or ECDSA P-256",
	} {
		if _, err := modify.NewHTTPSig(modify.HTTPSigOptions{Key: key}); err == nil || err.Error() != want {
			t.Errorf("NewHTTPSig: %v, want %q", err, want)
		}
	}
}

// "h:443" and "h" are one authority over https (RFC 9421 §2.2.3): a verifier that sees the
// Host without the default port accepts what was signed with it.
func TestHTTPSigNormalizesTheAuthority(t *testing.T) {
	now := time.Now()
	key := httpSigKeys(t)["ed25519"]
	sign, err := modify.NewHTTPSig(modify.HTTPSigOptions{Key: key, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://API.example:443/api/v1/pods", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sign(req); err != nil {
		t.Fatal(err)
	}
	seen := req.Clone(context.Background()) // as the server sees it
	seen.Host = "api.example"
	seen.TLS = &tls.ConnectionState{}
	if _, err := sigverify.HTTPSig(seen, nil, "kplug", func(string) (crypto.PublicKey, bool) { return key.Public(), true }, now); err != nil {
		t.Errorf("signed for API.example:443, verified for api.example: %v", err)
	}
}
