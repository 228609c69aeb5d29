package httpsig

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// Key is the signing material of a Signer. Exactly one of Signer and Secret is set.
type Key struct {
	// Signer is an asymmetric private key, possibly in hardware (PKCS#11): ECDSA P-256
	// (alg ecdsa-p256-sha256), ECDSA P-384 (ecdsa-p384-sha384), Ed25519 (ed25519) or RSA
	// of 2048 to 8192 bits (rsa-pss-sha512). An ECDSA signer may return ASN.1 DER or r||s.
	Signer crypto.Signer
	// Secret is a shared HMAC key (alg hmac-sha256) of at least 32 bytes, for servers
	// that resolve key IDs. NewSigner copies it.
	Secret []byte
	// Certificate is the leaf certificate of Signer's key. When set, the keyid is
	// CertificateKeyIDPrefix + hex SHA-256 of its DER, and every request carries it in
	// CertificateHeader; KeyID must then be empty.
	Certificate *x509.Certificate
	// KeyID names the key to a resolver when there is no Certificate: printable ASCII,
	// at most 256 bytes. Empty with a Derivation, which names the key.
	KeyID string
	// Derivation, with Secret, makes Secret the root of a KEP-6308 key derivation ladder
	// (or, with Derivation.From, the output of one of its steps): each signature is made
	// with the key the ladder derives for its own created time, and its keyid is
	// Derivation.Name followed by the steps' inputs. The 32-byte minimum applies to the
	// derived key, not to Secret.
	Derivation *Derivation
}

// Derivation places a Key's Secret on a key derivation ladder.
type Derivation struct {
	Ladder Ladder
	// Name is the key ID's first part: the name the material was returned under (an AWS
	// access key ID, say).
	Name string
	// From names the step whose output Secret is; empty when Secret is the root secret.
	From string
	// Scope holds the values of the ladder's scope steps.
	Scope map[string]string
}

// SignerOptions configure NewSigner.
type SignerOptions struct {
	Key Key
	// Headers are set on every request and covered by every signature (the client half
	// of KEP-6308 "Required signed headers"). They must include AudienceHeader with a
	// non-empty value; reserved names (IsReservedHeader) are refused.
	Headers map[string]string
	// Label keys the signature in Signature-Input and Signature; empty means DefaultLabel.
	Label string
	// Now is the clock for the created parameter; nil means time.Now.
	Now func() time.Time
	// Rand is the source of nonces (and of randomized signatures); nil means crypto/rand.
	Rand io.Reader
}

// Signer signs requests in the KEP-6308 profile. It is safe for concurrent use if its
// key, Now and Rand are.
type Signer struct {
	key         any // crypto.Signer or []byte
	alg, keyID  string
	label       string
	certificate string   // CertificateHeader value, or ""
	headers     []header // sorted by lowercase name
	now         func() time.Time
	rand        io.Reader
	derivation  *Derivation // with key the ladder's root or rung, derived per signature
}

type header struct{ name, lower, value string }

// Caps on what a signature carries, shared by the signer (which refuses to exceed them)
// and the verifier (which refuses before allocating for them).
const (
	maxKeyIDBytes = 256
	// nonceBytes is the random part of a nonce: 128 bits, unique per request.
	nonceBytes = 16
)

// NewSigner checks o and returns a Signer, or an error naming what is wrong.
func NewSigner(o SignerOptions) (*Signer, error) {
	s := &Signer{label: o.Label, now: o.Now, rand: o.Rand}
	if s.label == "" {
		s.label = DefaultLabel
	}
	if !isSFKey(s.label) {
		return nil, fmt.Errorf("httpsig: label %q is not a structured field key (lowercase letter or *, then lowercase letters, digits, _-.*)", s.label)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.rand == nil {
		s.rand = rand.Reader
	}
	if err := s.setKey(o.Key); err != nil {
		return nil, fmt.Errorf("httpsig: %w", err)
	}
	hs, err := signedHeaders(o.Headers)
	if err != nil {
		return nil, fmt.Errorf("httpsig: %w", err)
	}
	s.headers = hs
	return s, nil
}

func (s *Signer) setKey(k Key) error {
	switch {
	case k.Signer != nil && k.Secret != nil:
		return errors.New("key has both a signer and a secret; set one")
	case k.Derivation != nil:
		return s.setDerivation(k)
	case k.Secret != nil:
		if k.Certificate != nil {
			return errors.New("a certificate cannot go with a shared secret")
		}
		if len(k.Secret) < minSecretBytes {
			return fmt.Errorf("secret has %d bytes; hmac-sha256 needs at least %d", len(k.Secret), minSecretBytes)
		}
		if k.KeyID == "" {
			return errors.New("a shared secret needs a key ID")
		}
		s.key, s.alg = append([]byte(nil), k.Secret...), algHMAC
	case k.Signer != nil:
		alg, err := algorithmFor(k.Signer.Public())
		if err != nil {
			return fmt.Errorf("signing key: %w", err)
		}
		s.key, s.alg = k.Signer, alg
	default:
		return errors.New("key has neither a signer nor a secret")
	}
	if k.Certificate != nil {
		if k.KeyID != "" {
			return errors.New("key has both a certificate and a key ID; the certificate names the key")
		}
		if !publicKeysEqual(k.Certificate.PublicKey, k.Signer.Public()) {
			return errors.New("the certificate is not for the signing key")
		}
		s.keyID = CertificateKeyID(k.Certificate.Raw)
		s.certificate = ":" + base64.StdEncoding.EncodeToString(k.Certificate.Raw) + ":"
		return nil
	}
	if k.KeyID == "" {
		return errors.New("key has neither a certificate nor a key ID")
	}
	if len(k.KeyID) > maxKeyIDBytes || !isPrintableASCII(k.KeyID) {
		return fmt.Errorf("key ID must be printable ASCII of at most %d bytes", maxKeyIDBytes)
	}
	s.keyID = k.KeyID
	return nil
}

// setDerivation checks a derived key's material by deriving it once, so that a ladder
// that cannot fold (a scope value missing, an unknown step) fails here, not per request.
func (s *Signer) setDerivation(k Key) error {
	d := k.Derivation
	switch {
	case len(k.Secret) == 0:
		return errors.New("a key derivation needs a secret (the ladder's root, or a rung of it)")
	case k.Signer != nil || k.Certificate != nil:
		return errors.New("a key derivation derives a shared secret: it cannot go with a signer or a certificate")
	case k.KeyID != "":
		return errors.New("a derived key's key ID is the derivation's name and the ladder's inputs; leave KeyID empty")
	}
	own := &Derivation{Ladder: d.Ladder, Name: d.Name, From: d.From, Scope: maps.Clone(d.Scope)}
	own.Ladder.Steps = slices.Clone(d.Ladder.Steps)
	s.key, s.alg, s.derivation = append([]byte(nil), k.Secret...), algHMAC, own
	if _, _, err := s.derive(s.now()); err != nil {
		return err
	}
	s.keyID = own.Name
	return nil
}

// derive is the key and keyid of a signature created at created.
func (s *Signer) derive(created time.Time) ([]byte, string, error) {
	d := s.derivation
	var key []byte
	var keyID string
	var err error
	if d.From == "" {
		key, keyID, err = d.Ladder.Derive(d.Name, s.key.([]byte), created, d.Scope)
	} else {
		key, keyID, err = d.Ladder.DeriveFrom(d.Name, s.key.([]byte), d.From, created, d.Scope)
	}
	if err != nil {
		return nil, "", err
	}
	if len(keyID) > maxKeyIDBytes || !isPrintableASCII(keyID) {
		return nil, "", fmt.Errorf("derived key ID must be printable ASCII of at most %d bytes", maxKeyIDBytes)
	}
	return key, keyID, nil
}

// CertificateKeyID is the keyid of a certificate key: CertificateKeyIDPrefix and the
// lowercase hex SHA-256 of the leaf's DER (KEP-6308 "keyid, and how a request selects an
// authenticator").
func CertificateKeyID(der []byte) string {
	d := sha256.Sum256(der)
	return CertificateKeyIDPrefix + hex.EncodeToString(d[:])
}

// signedHeaders checks the configured headers and sorts them by name.
func signedHeaders(m map[string]string) ([]header, error) {
	hs := make([]header, 0, len(m))
	seen := map[string]bool{}
	for name, value := range m {
		lower := strings.ToLower(name)
		switch {
		case !isToken(name):
			return nil, fmt.Errorf("signed header %q is not a valid header name", name)
		case IsReservedHeader(name):
			return nil, fmt.Errorf("signed header %q is reserved (KEP-6308 \"Required signed headers\")", name)
		case seen[lower]:
			return nil, fmt.Errorf("signed header %q is named twice", name)
		case strings.ContainsAny(value, "\r\n\x00"):
			return nil, fmt.Errorf("signed header %q has a value that cannot be sent", name)
		}
		seen[lower] = true
		hs = append(hs, header{http.CanonicalHeaderKey(name), lower, value})
	}
	aud := strings.ToLower(AudienceHeader)
	sort.Slice(hs, func(i, j int) bool { return hs[i].lower < hs[j].lower })
	for _, h := range hs {
		if h.lower == aud {
			if strings.TrimSpace(h.value) == "" {
				return nil, fmt.Errorf("signed header %s is empty; it must name the cluster", AudienceHeader)
			}
			return hs, nil
		}
	}
	return nil, fmt.Errorf("signed headers lack %s, which must name the cluster (KEP-6308 \"Required signed headers\")", AudienceHeader)
}

// Algorithm is the alg parameter of s's signatures.
func (s *Signer) Algorithm() string { return s.alg }

// KeyID is the keyid parameter of s's signatures; for a derived key, the derivation's
// name, which each signature's keyid follows with the ladder's inputs.
func (s *Signer) KeyID() string { return s.keyID }

// Sign sets the configured headers, Content-Digest (sha-256, when the request has a
// body; the body is buffered up to MaxBodyBytes and a larger one is refused),
// CertificateHeader for certificate keys, and Signature-Input/Signature over the floor,
// content-digest, every protected header present and every configured header, with
// created, nonce, alg, tag and keyid. Signatures already on the request are replaced.
// The body is put back (with GetBody) so the request can be sent and retried. When no
// User-Agent is set, Sign sets an empty one, which stops Go's transports adding an
// uncovered default. A request whose impersonation headers a signature could not pin down
// (CheckImpersonation) is refused. On error the request's headers are unchanged and its
// body still reads from the start.
func (s *Signer) Sign(req *http.Request) error {
	if err := CheckImpersonation(req.Header); err != nil {
		return fmt.Errorf("httpsig: %w; the request is not signed", err)
	}
	body, err := readBody(req)
	if err != nil {
		return fmt.Errorf("httpsig: %w; the request is not signed", err)
	}
	nonce := make([]byte, nonceBytes)
	if _, err := io.ReadFull(s.rand, nonce); err != nil {
		return fmt.Errorf("httpsig: reading a nonce: %w", err)
	}
	h := req.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	for _, name := range []string{"Signature", "Signature-Input", contentDigestHeader, CertificateHeader} {
		deleteField(h, name)
	}
	for _, c := range s.headers {
		deleteField(h, c.name)
		h.Set(c.name, c.value)
	}
	if s.certificate != "" {
		h.Set(CertificateHeader, s.certificate)
	}
	if body != nil {
		h.Set(contentDigestHeader, contentDigest(body))
	}
	if _, ok := fieldValue(h, "user-agent"); !ok {
		h["User-Agent"] = []string{""}
	}
	components := s.components(h, body != nil)
	created := s.now().Unix()
	key, keyID := s.key, s.keyID
	if s.derivation != nil {
		// The ladder renders the created parameter's own date, so the verifier derives
		// the same key from what the signature says, across a date boundary too.
		derived, id, err := s.derive(time.Unix(created, 0))
		if err != nil {
			return fmt.Errorf("httpsig: deriving the signing key: %w", err)
		}
		key, keyID = derived, id
	}
	params := serializeParams(components, []param{
		{"created", created},
		{"nonce", base64.RawURLEncoding.EncodeToString(nonce)},
		{"alg", s.alg},
		{"tag", Tag},
		{"keyid", keyID},
	})
	withHeaders := *req
	withHeaders.Header = h
	base, err := signatureBase(&withHeaders, components, params)
	if err != nil {
		return fmt.Errorf("httpsig: %w", err)
	}
	sig, err := signBase(s.alg, key, s.rand, base)
	if err != nil {
		return fmt.Errorf("httpsig: signing with the %s key: %w", s.alg, err)
	}
	h.Set("Signature-Input", s.label+"="+params)
	h.Set("Signature", s.label+"=:"+base64.StdEncoding.EncodeToString(sig)+":")
	req.Header = h
	return nil
}

// components is what a signature over a request with headers h covers (KEP-6308 "What a
// signature covers"): the floor, content-digest with a body, every protected header
// present (sorted), and the configured headers.
func (s *Signer) components(h http.Header, body bool) []string {
	cs := make([]string, 0, len(Floor)+2+len(s.headers))
	cs = append(cs, Floor...)
	if body {
		cs = append(cs, "content-digest")
	}
	var protected []string
	for k, vs := range h {
		l := strings.ToLower(k)
		if !IsProtectedHeader(l) || (l == "user-agent" && allEmpty(vs)) || contains(protected, l) {
			continue
		}
		protected = append(protected, l)
	}
	sort.Strings(protected)
	cs = append(cs, protected...)
	for _, c := range s.headers {
		if !contains(cs, c.lower) {
			cs = append(cs, c.lower)
		}
	}
	return cs
}

// RoundTripper returns a RoundTripper that signs a clone of each request with s and
// sends it with next (http.DefaultTransport when nil). A request that cannot be signed
// is not sent: its body is closed and the error returned.
func (s *Signer) RoundTripper(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return roundTripper{s, next}
}

type roundTripper struct {
	s    *Signer
	next http.RoundTripper
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	if err := rt.s.Sign(out); err != nil {
		if out.Body != nil {
			_ = out.Body.Close()
		}
		return nil, err
	}
	return rt.next.RoundTrip(out)
}

// deleteField removes a field under its canonical key and any other spelling.
func deleteField(h http.Header, name string) {
	h.Del(name)
	for _, k := range otherKeys(h, name, http.CanonicalHeaderKey(name)) {
		delete(h, k)
	}
}

func allEmpty(vs []string) bool {
	for _, v := range vs {
		if v != "" {
			return false
		}
	}
	return true
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// isSFKey reports whether s is a structured field key (RFC 8941 §3.1.2).
func isSFKey(s string) bool {
	if s == "" || (s[0] != '*' && !isLower(s[0])) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isLower(c) && !isDigit(c) && strings.IndexByte("_-.*", c) < 0 {
			return false
		}
	}
	return true
}

// isToken reports whether s is an HTTP token (RFC 9110 §5.6.2), as a field name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLower(c|0x20) && !isDigit(c) && strings.IndexByte("!#$%&'*+-.^_`|~", c) < 0 {
			return false
		}
	}
	return true
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// publicKeysEqual compares public keys of any type that has an Equal method.
func publicKeysEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}
