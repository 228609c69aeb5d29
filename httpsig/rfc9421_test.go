package httpsig

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
)

// vector is one RFC 9421 Appendix B.2 test case.
type vector struct {
	title, base, input, signature string
}

func loadVectors(t *testing.T) []vector {
	b, err := os.ReadFile("testdata/rfc9421/vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	for _, part := range strings.Split(string(b), "== ")[1:] {
		title, rest, _ := strings.Cut(part, "\n")
		base, fields, _ := strings.Cut(rest, "\n--\n")
		var v = vector{title: title, base: base}
		for _, l := range strings.Split(strings.TrimSpace(fields), "\n") {
			name, value, _ := strings.Cut(l, ": ")
			if name == "Signature-Input" {
				v.input = value
			} else {
				v.signature = value
			}
		}
		vs = append(vs, v)
	}
	if len(vs) != 6 {
		t.Fatalf("read %d test cases, want B.2.1 to B.2.6", len(vs))
	}
	return vs
}

// rfcKeys are the Appendix B.1 keys by keyid: private keys, and the shared secret.
func rfcKeys(t *testing.T) map[string]any {
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/rfc9421/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	block, _ := pem.Decode(read("test-key-ecc-p256.pem"))
	ec, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	block, _ = pem.Decode(read("test-key-ed25519.pem"))
	ed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	// The RSA-PSS key is PKCS#8 under the id-RSASSA-PSS OID, which Go's PKCS#8 parser
	// refuses; its inner key is plain PKCS#1.
	block, _ = pem.Decode(read("test-key-rsa-pss.pem"))
	var p8 struct {
		Version    int
		Algorithm  pkix.AlgorithmIdentifier
		PrivateKey []byte
	}
	if _, err := asn1.Unmarshal(block.Bytes, &p8); err != nil {
		t.Fatal(err)
	}
	rsaKey, err := x509.ParsePKCS1PrivateKey(p8.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(read("test-shared-secret.b64"))))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]any{
		"test-key-ecc-p256":  ec,
		"test-key-ed25519":   ed,
		"test-key-rsa-pss":   rsaKey,
		"test-shared-secret": secret,
	}
}

// rfcTestRequest is Appendix B.2's test-request, as a server receives it.
func rfcTestRequest() *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/foo?param=Value&Pet=dog", strings.NewReader(`{"hello": "world"}`))
	req.Host = "example.com"
	req.Header.Set("Date", "Tue, 20 Apr 2021 02:07:55 GMT")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Digest", "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:")
	req.Header.Set("Content-Length", "18")
	return req
}

// TestRFC9421Vectors checks the signature base builder and the crypto layer against
// RFC 9421 Appendix B.2: the @signature-params line as the verifier re-serializes the
// received Signature-Input, the whole base for the request cases whose components the
// profile supports, the RFC's signatures verifying (and a changed base not), and, for the
// deterministic ed25519 and hmac-sha256, the same signature bytes from our signer.
func TestRFC9421Vectors(t *testing.T) {
	keys := rfcKeys(t)
	algs := map[string]string{
		"test-key-rsa-pss": algRSAPSS, "test-key-ecc-p256": algECDSAP256,
		"test-key-ed25519": algEd25519, "test-shared-secret": algHMAC,
	}
	for _, v := range loadVectors(t) {
		t.Run(v.title, func(t *testing.T) {
			inputs, err := httpsfv.UnmarshalDictionary([]string{v.input})
			if err != nil {
				t.Fatal(err)
			}
			label := inputs.Names()[0]
			m, _ := inputs.Get(label)
			il := m.(httpsfv.InnerList)
			params, err := httpsfv.Marshal(il)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(v.base, "\n")
			if want := strings.TrimPrefix(lines[len(lines)-1], `"@signature-params": `); params != want {
				t.Errorf("@signature-params:\n got %s\nwant %s", params, want)
			}
			var components []string
			supported := true
			for _, it := range il.Items {
				components = append(components, it.Value.(string))
				if len(it.Params.Names()) > 0 || it.Value == "@status" {
					supported = false
				}
			}
			if supported {
				base, err := signatureBase(rfcTestRequest(), components, params)
				if err != nil {
					t.Fatal(err)
				}
				if string(base) != v.base {
					t.Errorf("signature base:\n got %s\nwant %s", base, v.base)
				}
			}
			keyid, _ := il.Params.Get("keyid")
			alg, priv := algs[keyid.(string)], keys[keyid.(string)]
			sigs, err := httpsfv.UnmarshalDictionary([]string{v.signature})
			if err != nil {
				t.Fatal(err)
			}
			sm, _ := sigs.Get(label)
			sig := sm.(httpsfv.Item).Value.([]byte)
			verifyKey := priv
			if s, ok := priv.(crypto.Signer); ok {
				verifyKey = s.Public()
			}
			if err := verifyBase(alg, verifyKey, []byte(v.base), sig); err != nil {
				t.Errorf("the RFC's signature does not verify: %v", err)
			}
			if err := verifyBase(alg, verifyKey, []byte(v.base+" "), sig); err == nil {
				t.Error("the RFC's signature verifies over a changed base")
			}
			ours, err := signBase(alg, priv, rand.Reader, []byte(v.base))
			if err != nil {
				t.Fatal(err)
			}
			if alg == algEd25519 || alg == algHMAC {
				if !bytes.Equal(ours, sig) {
					t.Errorf("our %s signature differs from the RFC's", alg)
				}
			}
			if err := verifyBase(alg, verifyKey, []byte(v.base), ours); err != nil {
				t.Errorf("our signature does not verify: %v", err)
			}
		})
	}
}

// TestSerializeParamsMatchesParser checks that the signer's hand serialization of
// Signature-Input is what the verifier's parser re-serializes, including escapes.
func TestSerializeParamsMatchesParser(t *testing.T) {
	got := serializeParams([]string{"@method", "x-k8s-audience"}, []param{
		{"created", int64(1618884473)}, {"nonce", "n"}, {"alg", algEd25519}, {"tag", Tag}, {"keyid", `a "quoted" \ key`},
	})
	d, err := httpsfv.UnmarshalDictionary([]string{"sig1=" + got})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := d.Get("sig1")
	again, err := httpsfv.Marshal(m.(httpsfv.InnerList))
	if err != nil {
		t.Fatal(err)
	}
	if again != got {
		t.Errorf("serialized %s, parser gives back %s", got, again)
	}
}
