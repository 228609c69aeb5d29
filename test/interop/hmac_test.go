package interop

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/httpsig"
)

// The SigV4 side of the hmac-sha256 interop: AWS's published example credentials, and the
// scope a kubectl signing for EKS in one region would use.
const (
	awsAccessKeyID = "AKIDEXAMPLE"
	awsSecret      = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	awsRegion      = "eu-west-1"
	awsService     = "eks"
)

var awsScope = map[string]string{"region": awsRegion, "service": awsService}

// hmacKeys are the two kinds of hmac-sha256 key node is given: a shared secret, and an
// AWS secret access key it folds into the SigV4 signing key itself (interop.js hmacKey).
func hmacKeys(t *testing.T) (secret []byte, plain, derived testKey) {
	t.Helper()
	secret = make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	plain = testKey{alg: "hmac-sha256", hmac: map[string]any{"secretBase64": base64.StdEncoding.EncodeToString(secret)}}
	derived = testKey{alg: "hmac-sha256", hmac: map[string]any{
		"secretBase64": base64.StdEncoding.EncodeToString([]byte(awsSecret)),
		"sigv4":        map[string]any{"name": awsAccessKeyID, "region": awsRegion, "service": awsService},
	}}
	return secret, plain, derived
}

// TestNodeHMACSignatureVerifiesInKplug: httpsig.Verify, behind a real HTTP server, accepts
// the hmac-sha256 signatures http-message-signatures makes with a shared secret, and with
// the SigV4 signing key node folds for the signature's date under the key ID SigV4's
// credential scope names (kplug re-derives it through SigV4Ladder, as a resolver would);
// it refuses them on another path, and under another secret.
func TestNodeHMACSignatureVerifiesInKplug(t *testing.T) {
	run := findNode(t)
	secret, plain, derived := hmacKeys(t)
	ladder := httpsig.SigV4Ladder()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := httpsig.Policy{RequiredHeaders: map[string][]string{httpsig.AudienceHeader: {audience}}}
		sig, err := httpsig.Verify(r, p, func(s *httpsig.Signature) (any, error) {
			if s.KeyID == "node-key" {
				return secret, nil
			}
			name, _, _ := strings.Cut(s.KeyID, "/")
			if name != awsAccessKeyID {
				return nil, errors.New("unknown key")
			}
			key, keyID, err := ladder.Derive(name, []byte(awsSecret), s.Created, awsScope)
			if err != nil {
				return nil, err
			}
			if keyID != s.KeyID {
				return nil, fmt.Errorf("the key for this signature's date is %s", keyID)
			}
			return key, nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, sig.KeyID)
	}))
	defer srv.Close()
	for _, k := range []struct {
		name string
		key  testKey
	}{{"secret", plain}, {"sigv4-derived", derived}} {
		for _, r := range requests {
			t.Run(k.name+"/"+r.name, func(t *testing.T) {
				headers := nodeSign(t, run, srv.URL, k.key, r.method, r.target, r.body, "", false)
				input := headers["Signature-Input"]
				if !strings.Contains(input, `;alg="hmac-sha256";`) {
					t.Fatalf("node's Signature-Input %q, want alg hmac-sha256", input)
				}
				status, answer := send(t, r.method, srv.URL+r.target, r.body, headers)
				if status != http.StatusOK || !strings.Contains(input, `keyid="`+answer+`"`) {
					t.Errorf("got %d %q, want 200 and the keyid of %s", status, answer, input)
				}
				tampered := strings.Replace(r.target, "/namespaces/default/", "/namespaces/kube-system/", 1)
				status, answer = send(t, r.method, srv.URL+tampered, r.body, headers)
				if status != http.StatusUnauthorized || !strings.Contains(answer, "signature does not verify") {
					t.Errorf("on another path: got %d %q, want 401: signature does not verify", status, answer)
				}
			})
		}
	}
	t.Run("another secret", func(t *testing.T) {
		_, other, _ := hmacKeys(t)
		status, answer := nodeSignedRequest(t, run, srv.URL, other, http.MethodGet, "/api", "", false)
		if status != http.StatusUnauthorized || !strings.Contains(answer, "signature does not verify") {
			t.Errorf("got %d %q, want 401: signature does not verify", status, answer)
		}
	})
}

// TestKplugHMACSignatureVerifiesInNode: http-message-signatures accepts the hmac-sha256
// signatures httpsig.Signer makes with Key{Secret}, and with Key{Secret, Derivation} on the
// SigV4 ladder, from the root secret and from the rung after the region step: node folds
// the SigV4 signing key from the root secret itself, for the date of the signature's
// created, and checks the keyid is that derivation's credential scope. It refuses each once
// the path is changed, and under another secret.
func TestKplugHMACSignatureVerifiesInNode(t *testing.T) {
	run := findNode(t)
	secret, plain, derived := hmacKeys(t)
	// One instant for the signer and the rung, so that both are on the same date.
	now := time.Now().Truncate(time.Second)
	day := now.UTC().Format("20060102")
	// The rung after the region step, folded here with crypto/hmac, as a plugin returning
	// an intermediate key would.
	rung := []byte("AWS4" + awsSecret)
	for _, v := range []string{day, awsRegion} {
		m := hmac.New(sha256.New, rung)
		m.Write([]byte(v))
		rung = m.Sum(nil)
	}
	ladder := httpsig.SigV4Ladder()
	scopeID := strings.Join([]string{awsAccessKeyID, day, awsRegion, awsService, "aws4_request"}, "/")
	_, other, otherDerived := hmacKeys(t)
	otherDerived.hmac["secretBase64"] = base64.StdEncoding.EncodeToString([]byte("another" + awsSecret))
	for _, k := range []struct {
		name      string
		key       httpsig.Key
		node, bad testKey
		keyID     string
	}{
		{"secret", httpsig.Key{Secret: secret, KeyID: "kplug-hmac"}, plain, other, "kplug-hmac"},
		{"sigv4-derived", httpsig.Key{Secret: []byte(awsSecret), Derivation: &httpsig.Derivation{
			Ladder: ladder, Name: awsAccessKeyID, Scope: awsScope}}, derived, otherDerived, scopeID},
		{"sigv4-derived from the region rung", httpsig.Key{Secret: rung, Derivation: &httpsig.Derivation{
			Ladder: ladder, Name: awsAccessKeyID, From: "region", Scope: awsScope}}, derived, otherDerived, scopeID},
	} {
		for _, r := range requests {
			t.Run(k.name+"/"+r.name, func(t *testing.T) {
				s, err := httpsig.NewSigner(httpsig.SignerOptions{
					Key:     k.key,
					Headers: map[string]string{httpsig.AudienceHeader: audience},
					Now:     func() time.Time { return now },
				})
				if err != nil {
					t.Fatal(err)
				}
				url := "https://cluster.example" + r.target
				var body io.Reader
				if r.body != "" {
					body = strings.NewReader(r.body)
				}
				req, _ := http.NewRequest(r.method, url, body)
				req.Header.Set("User-Agent", "kubectl/v1.36.3 (linux/amd64)")
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
				for _, tc := range []struct {
					name string
					url  string
					key  testKey
					want bool
				}{
					{"as signed", url, k.node, true},
					{"on another path", strings.Replace(url, "/namespaces/default/", "/namespaces/kube-system/", 1), k.node, false},
					{"under another secret", url, k.bad, false},
				} {
					var out struct {
						Verified bool
						Params   map[string]any
						Error    string
					}
					run(t, map[string]any{"op": "verify", "alg": "hmac-sha256", "hmac": tc.key.hmac,
						"request": map[string]any{"method": r.method, "url": tc.url, "headers": headers}}, &out)
					if out.Verified != tc.want || out.Error != "" {
						t.Errorf("%s: node verified=%v error=%q, want verified=%v", tc.name, out.Verified, out.Error, tc.want)
					}
					if tc.want && (out.Params["keyid"] != k.keyID || out.Params["tag"] != httpsig.Tag || out.Params["alg"] != "hmac-sha256") {
						t.Errorf("node read parameters %v, want keyid %q", out.Params, k.keyID)
					}
				}
			})
		}
	}
}
