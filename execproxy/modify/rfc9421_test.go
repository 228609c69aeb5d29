package modify_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/kplug/kplug/execproxy/modify"
)

// verifyHTTPSig is an RFC 9421 verifier written apart from the signer: it parses the
// structured fields with a third-party RFC 8941 parser, rebuilds the signature base from
// what the server received, checks the signature with the public key alone, and applies a
// verifier's policy: the request target, the body digest and every identity-bearing header
// present must be covered.
func verifyHTTPSig(pub crypto.PublicKey, label string, now time.Time) func(r *http.Request, body []byte) error {
	return func(r *http.Request, body []byte) error {
		inputs, err := httpsfv.UnmarshalDictionary(r.Header.Values("Signature-Input"))
		if err != nil {
			return fmt.Errorf("Signature-Input: %w", err)
		}
		sigs, err := httpsfv.UnmarshalDictionary(r.Header.Values("Signature"))
		if err != nil {
			return fmt.Errorf("Signature: %w", err)
		}
		in, ok1 := inputs.Get(label)
		sigItem, ok2 := sigs.Get(label)
		if !ok1 || !ok2 {
			return fmt.Errorf("no signature labelled %q", label)
		}
		list, ok := in.(httpsfv.InnerList)
		if !ok {
			return errors.New("Signature-Input member is not an inner list")
		}
		covered := map[string]bool{}
		var base strings.Builder
		for _, item := range list.Items {
			name, _ := item.Value.(string)
			covered[name] = true
			var value string
			switch name {
			case "@method":
				value = r.Method
			case "@authority":
				value = r.Host
			case "@path":
				value = r.URL.EscapedPath()
			case "@query":
				value = "?" + r.URL.RawQuery
			default:
				vs := r.Header.Values(name)
				if len(vs) == 0 {
					return fmt.Errorf("covered header %s is missing", name)
				}
				value = strings.Join(vs, ", ")
			}
			fmt.Fprintf(&base, "%q: %s\n", name, value)
		}
		params, err := httpsfv.Marshal(httpsfv.List{list})
		if err != nil {
			return err
		}
		fmt.Fprintf(&base, "%q: %s", "@signature-params", params)

		for _, want := range []string{"@method", "@authority", "@path", "@query"} {
			if !covered[want] {
				return fmt.Errorf("%s is not covered", want)
			}
		}
		for name := range r.Header {
			l := strings.ToLower(name)
			if (strings.HasPrefix(l, "impersonate-") || l == "authorization" || l == "content-type") && !covered[l] {
				return fmt.Errorf("%s is present but not covered", l)
			}
		}
		if len(body) > 0 && r.Header.Get("Connection") == "" {
			sum := sha256.Sum256(body)
			if !covered["content-digest"] || r.Header.Get("Content-Digest") != "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":" {
				return errors.New("body does not match a covered content-digest")
			}
		}
		created, _ := list.Params.Get("created")
		if c, ok := created.(int64); !ok || time.Unix(c, 0).Sub(now).Abs() > time.Minute {
			return fmt.Errorf("created %v is not now", created)
		}
		sigItemV, _ := sigItem.(httpsfv.Item)
		sig, _ := sigItemV.Value.([]byte)
		msg := []byte(base.String())
		switch k := pub.(type) {
		case ed25519.PublicKey:
			if !ed25519.Verify(k, msg, sig) {
				return errors.New("bad signature")
			}
		case *ecdsa.PublicKey:
			digest := sha256.Sum256(msg)
			if len(sig) != 64 || !ecdsa.Verify(k, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
				return errors.New("bad signature")
			}
		}
		return nil
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
