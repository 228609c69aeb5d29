package httpsig

// API stub agreed between the branches of issue 15; the core branch replaces every
// body below with the implementation and deletes this comment.

import (
	"crypto"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"time"
)

var errUnimplemented = errors.New("httpsig: not implemented yet")

// Key is the signing material of a Signer. Exactly one of Signer and Secret is set.
type Key struct {
	// Signer is an asymmetric private key, possibly in hardware (PKCS#11): ECDSA P-256
	// (alg ecdsa-p256-sha256), ECDSA P-384 (ecdsa-p384-sha384), Ed25519 (ed25519) or RSA
	// of at least 2048 bits (rsa-pss-sha512).
	Signer crypto.Signer
	// Secret is a shared HMAC key (alg hmac-sha256), for servers that resolve key IDs.
	Secret []byte
	// Certificate is the leaf certificate of Signer's key. When set, the keyid is
	// CertificateKeyIDPrefix + hex SHA-256 of its DER, and every request carries it in
	// CertificateHeader; KeyID must then be empty.
	Certificate *x509.Certificate
	// KeyID names the key to a resolver when there is no Certificate.
	KeyID string
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
// key is.
type Signer struct{}

// NewSigner checks o and returns a Signer, or an error naming what is wrong.
func NewSigner(o SignerOptions) (*Signer, error) { return nil, errUnimplemented }

// Sign sets the configured headers, Content-Digest (sha-256, when the request has a
// body; the body is buffered up to MaxBodyBytes and a larger one is refused),
// CertificateHeader for certificate keys, and Signature-Input/Signature over the floor,
// content-digest, every protected header present and every configured header, with
// created, nonce, alg, tag and keyid. Signatures already on the request are replaced.
func (s *Signer) Sign(req *http.Request) error { return errUnimplemented }

// Algorithm is the alg parameter of s's signatures.
func (s *Signer) Algorithm() string { return "" }

// KeyID is the keyid parameter of s's signatures.
func (s *Signer) KeyID() string { return "" }

// RoundTripper returns a RoundTripper that signs a clone of each request with s and
// sends it with next.
func (s *Signer) RoundTripper(next http.RoundTripper) http.RoundTripper { return next }

// Policy is the verifier's half of the profile: what every accepted signature must
// satisfy whoever made it (KEP-6308 "Server configuration", "Verification order").
type Policy struct {
	// RequiredHeaders maps a header name to the values accepted for it; every signature
	// must cover each and, where the list is non-empty, carry one of the values exactly.
	// It must name AudienceHeader with a non-empty list.
	RequiredHeaders map[string][]string
	// MaxAge is how old a created timestamp may be; zero means one minute.
	MaxAge time.Duration
	// MaxClockSkew is added to MaxAge, and is how far in the future created may be;
	// zero means five seconds.
	MaxClockSkew time.Duration
	// Now is the verifier's clock; nil means time.Now.
	Now func() time.Time
}

// Validate reports a Policy that breaks a rule of KEP-6308 "Required signed headers".
func (p Policy) Validate() error { return errUnimplemented }

// Signature is one signature of a request, parsed and checked against a Policy but
// not yet verified with a key.
type Signature struct {
	Label, KeyID, Algorithm, Nonce, Tag string
	Created                             time.Time
	// Components are the covered component identifiers, in order.
	Components []string
	// Certificate is the leaf from CertificateHeader, set only when KeyID is a
	// certificate keyid whose digest matches those bytes.
	Certificate *x509.Certificate
}

// Outcome classifies why a request was refused, for metrics and logs (KEP-6308 "Metrics").
type Outcome string

// Outcomes of Verify.
const (
	Accepted   Outcome = "accepted"
	Malformed  Outcome = "malformed"   // unparsable or over the length caps
	Stale      Outcome = "stale"       // created outside MaxAge+MaxClockSkew
	Uncovered  Outcome = "uncovered"   // floor, body or protected header rule broken
	Required   Outcome = "required"    // a required signed header absent, uncovered or not accepted
	UnknownKey Outcome = "unknown_key" // resolve refused the key
	Forged     Outcome = "forged"      // the signature or the body digest does not verify
)

// Error is a refused request: the outcome, and a message that names what and why
// without any secret.
type Error struct {
	Outcome Outcome
	Err     error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Verify checks the request's signatures in KEP-6308 "Verification order" and returns
// the first that is accepted (a request may carry several under different labels;
// KEP-6308 "Signature-Input and Signature"). resolve returns the key for a parsed and
// policy-checked signature: a crypto.PublicKey, or []byte for hmac-sha256; its error
// refuses that signature. The body, if any, is read (up to MaxBodyBytes), checked
// against the covered Content-Digest and put back. Verify does not remove the
// signature headers; the caller does once it has accepted the identity.
func Verify(req *http.Request, p Policy, resolve func(*Signature) (any, error)) (*Signature, error) {
	return nil, errUnimplemented
}
