package httpsig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

const audience = "https://cluster.example"

var testNow = time.Unix(1_800_000_000, 0)

func testPolicy() Policy {
	return Policy{
		RequiredHeaders: map[string][]string{AudienceHeader: {audience}},
		Now:             func() time.Time { return testNow },
	}
}

// testRequest is a server-side request as the verifier receives it.
func testRequest(method, target, body string) *http.Request {
	var req *http.Request
	if body == "" {
		req = httptest.NewRequest(method, target, nil)
	} else {
		req = httptest.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	}
	req.Host = "cluster.example:6443"
	req.Header.Set("User-Agent", "kubectl/v1.36.3")
	return req
}

func newTestSigner(t *testing.T, key crypto.Signer) *Signer {
	t.Helper()
	s, err := NewSigner(SignerOptions{
		Key:     Key{Signer: key, KeyID: "test-key"},
		Headers: map[string]string{AudienceHeader: audience},
		Now:     func() time.Time { return testNow },
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func publicResolver(pub any) func(*Signature) (any, error) {
	return func(*Signature) (any, error) { return pub, nil }
}

// rawSign signs req over components with exactly params, bypassing the Signer's rules,
// so that a test can make a signature that is valid cryptographically and wrong only in
// what it tests.
func rawSign(t *testing.T, req *http.Request, label string, key crypto.Signer, alg string, components []string, params []param) {
	t.Helper()
	p := serializeParams(components, params)
	base, err := signatureBase(req, components, p)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := signBase(alg, key, rand.Reader, base)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Add("Signature-Input", label+"="+p)
	req.Header.Add("Signature", label+"=:"+base64.StdEncoding.EncodeToString(sig)+":")
}

func profileParams(alg string) []param {
	return []param{{"created", testNow.Unix()}, {"nonce", "bm9uY2U"}, {"alg", alg}, {"tag", Tag}, {"keyid", "test-key"}}
}

// without returns params without name, or with name's value replaced when value is set.
func withParam(ps []param, name string, value any) []param {
	var out []param
	for _, p := range ps {
		if p.name != name {
			out = append(out, p)
		} else if value != nil {
			out = append(out, param{name, value})
		}
	}
	return out
}

var profileComponents = []string{"@method", "@authority", "@path", "@query", "user-agent", "x-k8s-audience"}

func TestVerify(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	signer := newTestSigner(t, ec)
	signed := func(req *http.Request) *http.Request {
		if err := signer.Sign(req); err != nil {
			t.Fatal(err)
		}
		return req
	}
	get := func() *http.Request {
		r := testRequest(http.MethodGet, "/api/v1/pods?limit=1", "")
		r.Header.Set(AudienceHeader, audience)
		return r
	}
	raw := func(params []param, components ...string) func() *http.Request {
		return func() *http.Request {
			r := get()
			if components == nil {
				components = profileComponents
			}
			rawSign(t, r, "sig1", ec, algECDSAP256, components, params)
			return r
		}
	}
	p := profileParams(algECDSAP256)
	cases := []struct {
		name    string
		req     func() *http.Request
		policy  func(*Policy)
		resolve func(*Signature) (any, error)
		outcome Outcome // "" is accepted
		err     string
	}{
		{name: "signed GET", req: func() *http.Request { return signed(get()) }},
		{name: "signed POST with body", req: func() *http.Request {
			r := testRequest(http.MethodPost, "/api/v1/namespaces/default/pods?dryRun=All", `{"kind":"Pod"}`)
			r.Header.Set(AudienceHeader, audience)
			return signed(r)
		}},
		{name: "profile parameters by hand", req: raw(p)},
		{name: "created absent", req: raw(withParam(p, "created", nil)), outcome: Malformed, err: `signature "sig1": created is missing`},
		{name: "created not an integer", req: raw(withParam(p, "created", "1800000000")), outcome: Malformed, err: "created is not an integer"},
		{name: "created stale", req: raw(withParam(p, "created", testNow.Add(-66*time.Second).Unix())), outcome: Stale, err: "created 1m6s ago, more than maxAge 1m0s plus maxClockSkew 5s"},
		{name: "created at the edge of the window", req: raw(withParam(p, "created", testNow.Add(-65*time.Second).Unix()))},
		{name: "created in the future", req: raw(withParam(p, "created", testNow.Add(6*time.Second).Unix())), outcome: Stale, err: "created 6s in the future, more than maxClockSkew 5s"},
		{name: "nonce absent", req: raw(withParam(p, "nonce", nil)), outcome: Malformed, err: "nonce is missing"},
		{name: "nonce not a string", req: raw(withParam(p, "nonce", int64(7))), outcome: Malformed, err: "nonce is not a non-empty string"},
		{name: "alg absent", req: raw(withParam(p, "alg", nil)), outcome: Malformed, err: "alg is missing"},
		{name: "alg unknown", req: raw(withParam(p, "alg", "rsa-v1_5-sha256")), outcome: Malformed, err: `alg "rsa-v1_5-sha256" is not one of`},
		{name: "tag absent", req: raw(withParam(p, "tag", nil)), outcome: Malformed, err: "tag is missing"},
		{name: "tag of another application", req: raw(withParam(p, "tag", "header-example")), outcome: Malformed, err: `tag is "header-example", not "kubernetes"`},
		{name: "keyid absent", req: raw(withParam(p, "keyid", nil)), outcome: Malformed, err: "keyid is missing"},
		{name: "keyid over the cap", req: raw(withParam(p, "keyid", strings.Repeat("k", 257))), outcome: Malformed, err: "keyid has 257 bytes; at most 256 are accepted"},
		{name: "label other than sig1", req: func() *http.Request {
			r := get()
			rawSign(t, r, "proxy-7", ec, algECDSAP256, profileComponents, p)
			return r
		}},
		{name: "two signatures, the first bad", req: func() *http.Request {
			r := get()
			rawSign(t, r, "sig1", other, algECDSAP256, profileComponents, p)
			rawSign(t, r, "sig2", ec, algECDSAP256, profileComponents, p)
			return r
		}},
		{name: "two signatures, both bad", req: func() *http.Request {
			r := get()
			rawSign(t, r, "sig1", other, algECDSAP256, profileComponents, p)
			rawSign(t, r, "sig2", ec, algECDSAP256, profileComponents, withParam(p, "tag", nil))
			return r
		}, outcome: Forged, err: `httpsig: none of 2 signatures accepted: signature "sig1": key "test-key": signature does not verify; signature "sig2": tag is missing`},
		{name: "floor: @authority uncovered", req: raw(p, "@method", "@path", "@query", "user-agent", "x-k8s-audience"), outcome: Uncovered, err: "does not cover @authority, which every signature must"},
		{name: "floor: @query uncovered", req: raw(p, "@method", "@authority", "@path", "user-agent", "x-k8s-audience"), outcome: Uncovered, err: "does not cover @query"},
		{name: "body without covered content-digest", req: func() *http.Request {
			r := testRequest(http.MethodPost, "/api/v1/pods", `{}`)
			r.Header.Set(AudienceHeader, audience)
			rawSign(t, r, "sig1", ec, algECDSAP256, append(profileComponents, "content-type"), p)
			return r
		}, outcome: Uncovered, err: "the request has a body but the signature does not cover content-digest"},
		{name: "body tampered", req: func() *http.Request {
			r := testRequest(http.MethodPost, "/api/v1/pods", `{"spec":{}}`)
			r.Header.Set(AudienceHeader, audience)
			signed(r)
			tampered := testRequest(http.MethodPost, "/api/v1/pods", `{"spec":{"x":1}}`)
			tampered.Header = r.Header
			return tampered
		}, outcome: Forged, err: "Content-Digest sha-256 does not match the body"},
		{name: "body over MaxBodyBytes", req: func() *http.Request {
			big := strings.Repeat("x", MaxBodyBytes+1)
			r := testRequest(http.MethodPost, "/api/v1/pods", big)
			r.ContentLength = -1 // chunked: the limit is found by reading
			r.Header.Set(AudienceHeader, audience)
			r.Header.Set("Content-Digest", contentDigest(held([]byte(big))))
			rawSign(t, r, "sig1", ec, algECDSAP256, append(profileComponents, "content-type", "content-digest"), p)
			return r
		}, outcome: Malformed, err: "request body is over 3145728 bytes, kube-apiserver's limit"},
		{name: "Content-Digest on a bodiless request is checked", req: func() *http.Request {
			r := get()
			r.Header.Set("Content-Digest", contentDigest(held([]byte("not empty"))))
			rawSign(t, r, "sig1", ec, algECDSAP256, append(profileComponents, "content-digest"), p)
			return r
		}, outcome: Forged, err: "Content-Digest sha-256 does not match the body"},
		{name: "uncovered Impersonate-User added", req: func() *http.Request {
			r := signed(get())
			r.Header.Set("Impersonate-User", "system:admin")
			return r
		}, outcome: Uncovered, err: "the request has Impersonate-User, which the signature does not cover"},
		{name: "uncovered Impersonate-Extra-Scopes added", req: func() *http.Request {
			r := signed(get())
			r.Header.Set("Impersonate-Extra-Scopes", "all")
			return r
		}, outcome: Uncovered, err: "Impersonate-Extra-Scopes"},
		{name: "Host rewritten", req: func() *http.Request {
			r := signed(get())
			r.Host = "internal.example:6443"
			return r
		}, outcome: Forged, err: "signature does not verify"},
		{name: "covered header stripped", req: func() *http.Request {
			r := signed(get())
			r.Header.Del("User-Agent")
			return r
		}, outcome: Forged, err: `covered field "user-agent" is not on the request`},
		{name: "audience absent", req: raw(p, "@method", "@authority", "@path", "@query", "user-agent"), policy: func(*Policy) {}, outcome: Required, err: "required header X-K8s-Audience is not covered"},
		{name: "audience header absent", req: func() *http.Request {
			r := testRequest(http.MethodGet, "/api", "")
			rawSign(t, r, "sig1", ec, algECDSAP256, profileComponents[:5], p)
			return r
		}, outcome: Required, err: "required header X-K8s-Audience is absent"},
		{name: "audience not named by the policy: still required", req: func() *http.Request {
			r := testRequest(http.MethodGet, "/api", "")
			rawSign(t, r, "sig1", ec, algECDSAP256, profileComponents[:5], p)
			return r
		}, policy: func(p *Policy) { delete(p.RequiredHeaders, AudienceHeader) }, outcome: Required, err: "required header X-K8s-Audience is absent"},
		{name: "audience not named by the policy: any value", req: func() *http.Request {
			r := testRequest(http.MethodGet, "/api", "")
			r.Header.Set(AudienceHeader, "https://any.example")
			rawSign(t, r, "sig1", ec, algECDSAP256, profileComponents, p)
			return r
		}, policy: func(p *Policy) { delete(p.RequiredHeaders, AudienceHeader) }},
		{name: "audience of another cluster", req: func() *http.Request {
			r := testRequest(http.MethodGet, "/api", "")
			r.Header.Set(AudienceHeader, "https://other.example")
			rawSign(t, r, "sig1", ec, algECDSAP256, profileComponents, p)
			return r
		}, outcome: Required, err: "required header X-K8s-Audience has a value this server does not accept"},
		{name: "audience: each accepted value", req: func() *http.Request {
			r := testRequest(http.MethodGet, "/api", "")
			r.Header.Set(AudienceHeader, "https://alias.example")
			rawSign(t, r, "sig1", ec, algECDSAP256, profileComponents, p)
			return r
		}, policy: func(p *Policy) { p.RequiredHeaders[AudienceHeader] = []string{audience, "https://alias.example"} }},
		{name: "required header with an empty list: any value", req: func() *http.Request {
			r := get()
			r.Header.Set("X-Session-Token", "anything")
			rawSign(t, r, "sig1", ec, algECDSAP256, append(profileComponents, "x-session-token"), p)
			return r
		}, policy: func(p *Policy) { p.RequiredHeaders["X-Session-Token"] = nil }},
		{name: "required header with an empty list: absent", req: raw(p), policy: func(p *Policy) { p.RequiredHeaders["X-Session-Token"] = nil },
			outcome: Required, err: "required header X-Session-Token is absent"},
		{name: "required header present but uncovered", req: func() *http.Request {
			r := raw(p)()
			r.Header.Set("X-Session-Token", "added")
			return r
		}, policy: func(p *Policy) { p.RequiredHeaders["X-Session-Token"] = nil }, outcome: Required, err: "required header X-Session-Token is not covered"},
		{name: "Signature-Input over the cap", req: func() *http.Request {
			r := signed(get())
			r.Header.Set("Signature-Input", r.Header.Get("Signature-Input")+strings.Repeat(" ", 8<<10))
			return r
		}, outcome: Malformed, err: "Signature-Input has 8"},
		{name: "too many components", req: func() *http.Request {
			r := get()
			cs := append([]string{}, profileComponents...)
			for i := 0; i < 60; i++ {
				cs = append(cs, "x-pad-"+strings.Repeat("a", i+1))
				r.Header.Set(cs[len(cs)-1], "v")
			}
			rawSign(t, r, "sig1", ec, algECDSAP256, cs, p)
			return r
		}, outcome: Malformed, err: "covers 66 components; at most 64 are accepted"},
		{name: "Signature without Signature-Input", req: func() *http.Request {
			r := signed(get())
			r.Header.Del("Signature-Input")
			return r
		}, outcome: Malformed, err: "httpsig: the request needs both Signature-Input and Signature"},
		// Found by FuzzVerify: an empty dictionary left Verify with no refusal to report.
		{name: "empty Signature-Input", req: func() *http.Request {
			r := signed(get())
			r.Header.Set("Signature-Input", "")
			return r
		}, outcome: Malformed, err: "httpsig: Signature-Input names no signature"},
		{name: "unparsable Signature-Input", req: func() *http.Request {
			r := signed(get())
			r.Header.Set("Signature-Input", "sig1=(")
			return r
		}, outcome: Malformed, err: "Signature-Input is not a structured field dictionary"},
		{name: "ECDSA key under rsa-pss-sha512", req: raw(withParam(p, "alg", algRSAPSS)), outcome: Forged,
			err: `alg "rsa-pss-sha512" does not fit the key, which is an ECDSA P-256 key`},
		{name: "public key under hmac-sha256", req: raw(withParam(p, "alg", algHMAC)), outcome: Forged,
			err: `alg "hmac-sha256" needs a shared secret, but the key is an ECDSA P-256 key`},
		{name: "Ed25519 key for an ECDSA signature", req: raw(p), resolve: publicResolver(ed.Public()), outcome: Forged,
			err: `alg "ecdsa-p256-sha256" does not fit the key, which is an Ed25519 key`},
		{name: "resolver refuses", req: raw(p), resolve: func(*Signature) (any, error) { return nil, errors.New("no such key") },
			outcome: UnknownKey, err: `signature "sig1": key "test-key": no such key`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := testPolicy()
			if tc.policy != nil {
				tc.policy(&pol)
			}
			resolve := tc.resolve
			if resolve == nil {
				resolve = publicResolver(ec.Public())
			}
			sig, err := Verify(tc.req(), pol, resolve)
			if tc.outcome == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if sig.Algorithm != algECDSAP256 || sig.KeyID != "test-key" || sig.Tag != Tag || sig.Nonce == "" {
					t.Errorf("accepted signature %+v", sig)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want a refusal (%s)", err, tc.outcome)
			}
			if e.Outcome != tc.outcome || !strings.Contains(e.Error(), tc.err) {
				t.Errorf("got %s: %v\nwant %s: ...%s...", e.Outcome, e, tc.outcome, tc.err)
			}
		})
	}
}

func TestVerifyCertificate(t *testing.T) {
	ca := testpki.NewTestCA(t, "httpsig test CA")
	kp, err := ca.IssueClient("alice", "alice")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	kp2, _ := ca.IssueClient("bob", "bob")
	pair2, _ := tls.X509KeyPair(kp2.CertPEM, kp2.KeyPEM)
	s, err := NewSigner(SignerOptions{
		Key:     Key{Signer: pair.PrivateKey.(crypto.Signer), Certificate: pair.Leaf},
		Headers: map[string]string{AudienceHeader: audience},
		Now:     func() time.Time { return testNow },
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := CertificateKeyID(pair.Leaf.Raw); s.KeyID() != want || !strings.HasPrefix(want, "x509-sha256:") || len(want) != len("x509-sha256:")+64 {
		t.Fatalf("keyid %q, want %q", s.KeyID(), want)
	}
	resolve := func(sig *Signature) (any, error) {
		if sig.Certificate == nil {
			return nil, errors.New("no certificate")
		}
		return sig.Certificate.PublicKey, nil
	}
	req := testRequest(http.MethodGet, "/api", "")
	if err := s.Sign(req); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(req.Header.Get("Signature-Input"), `"signature-certificate"`) {
		t.Errorf("Signature-Certificate is not covered: %s", req.Header.Get("Signature-Input"))
	}
	sig, err := Verify(req, testPolicy(), resolve)
	if err != nil {
		t.Fatal(err)
	}
	if sig.Certificate == nil || sig.Certificate.Subject.CommonName != "alice" {
		t.Errorf("Certificate = %v, want alice's", sig.Certificate)
	}

	// Another certificate in the header: its digest is not the keyid.
	swapped := testRequest(http.MethodGet, "/api", "")
	_ = s.Sign(swapped)
	swapped.Header.Set(CertificateHeader, ":"+base64.StdEncoding.EncodeToString(pair2.Leaf.Raw)+":")
	_, err = Verify(swapped, testPolicy(), resolve)
	var e *Error
	if !errors.As(err, &e) || e.Outcome != UnknownKey || !strings.Contains(err.Error(), "is not the SHA-256 of the certificate in Signature-Certificate") {
		t.Errorf("swapped certificate: got %v, want unknown_key: digest mismatch", err)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers map[string][]string
		err     string
	}{
		{"audience only", map[string][]string{AudienceHeader: {audience}}, ""},
		{"audience in lowercase", map[string][]string{"x-k8s-audience": {audience}}, ""},
		{"audience not named", map[string][]string{"X-Session-Token": nil}, ""},
		{"audience with an empty list", map[string][]string{AudienceHeader: {}}, "httpsig: required header X-K8s-Audience needs at least one accepted value naming this cluster"},
		{"reserved Authorization", map[string][]string{AudienceHeader: {audience}, "Authorization": nil}, `httpsig: required header "Authorization" is reserved`},
		{"reserved Impersonate-User", map[string][]string{AudienceHeader: {audience}, "Impersonate-User": nil}, `required header "Impersonate-User" is reserved`},
		{"invalid name", map[string][]string{AudienceHeader: {audience}, "X Bad": nil}, `required header "X Bad" is not a valid header name`},
		{"empty value", map[string][]string{AudienceHeader: {audience, ""}}, `lists an empty value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Policy{RequiredHeaders: tc.headers}.Validate()
			if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("got %v, want %q", err, tc.err)
			}
		})
	}
}

// held is b as a buffered body.
func held(b []byte) *heldBody { return &heldBody{chunks: [][]byte{b}, size: int64(len(b))} }
