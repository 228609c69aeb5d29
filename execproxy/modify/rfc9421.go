package modify

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// HTTPSigOptions configure NewHTTPSig.
type HTTPSigOptions struct {
	// Key signs; its public half must be Ed25519 or ECDSA P-256. It may be a hardware key
	// (any crypto.Signer). Required.
	Key crypto.Signer
	// KeyID is the keyid parameter the verifier uses to find the public key; empty means
	// the unpadded base64url SHA-256 of the public key's PKIX encoding.
	KeyID string
	// Label names the signature in the Signature and Signature-Input dictionaries; empty
	// means "kplug".
	Label string
	// Now is the clock for the created parameter; nil means time.Now.
	Now func() time.Time
}

// Covered components, in this order, of every signature NewHTTPSig makes.
var httpSigDerived = []string{"@method", "@authority", "@path", "@query"}

// NewHTTPSig returns a request modifier that signs each request with an RFC 9421 HTTP
// Message Signature, in the Signature-Input and Signature headers (replacing any there).
//
// Covered components: "@method", "@authority", "@path" and "@query" always; then, sorted
// by name, every one of these headers that is present: Authorization, Content-Digest,
// Content-Type, Impersonate-*, Sec-WebSocket-Protocol, X-Remote-* and
// X-Stream-Protocol-Version. The signer sets Content-Digest (sha-256) for non-empty bodies
// of up to MaxSignedBody bytes; the bodies of upgrades, watches, followed logs and larger
// bodies are not covered. Parameters: created, keyid, alg ("ed25519" or
// "ecdsa-p256-sha256").
//
// The modifier is safe for concurrent use if Key is.
func NewHTTPSig(o HTTPSigOptions) (func(*http.Request) error, error) {
	if o.Key == nil {
		return nil, errors.New("rfc9421: no signing key")
	}
	alg, err := httpSigAlg(o.Key.Public())
	if err != nil {
		return nil, err
	}
	keyID := o.KeyID
	if keyID == "" {
		der, err := x509.MarshalPKIXPublicKey(o.Key.Public())
		if err != nil {
			return nil, fmt.Errorf("rfc9421: %w", err)
		}
		sum := sha256.Sum256(der)
		keyID = base64.RawURLEncoding.EncodeToString(sum[:])
	}
	if strings.ContainsAny(keyID, "\"\\") || !isPrintableASCII(keyID) {
		return nil, fmt.Errorf("rfc9421: key id %q must be printable ASCII without quotes or backslashes", keyID)
	}
	label := o.Label
	if label == "" {
		label = "kplug"
	}
	if !isSFKey(label) {
		return nil, fmt.Errorf("rfc9421: label %q must be lowercase letters, digits, _-.* starting with a letter", label)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	s := &httpSigner{key: o.Key, alg: alg, keyID: keyID, label: label, now: now}
	return s.sign, nil
}

type httpSigner struct {
	key               crypto.Signer
	alg, keyID, label string
	now               func() time.Time
}

func (s *httpSigner) sign(req *http.Request) error {
	body, hashed, err := bufferBody(req)
	if err != nil {
		return fmt.Errorf("rfc9421: %w", err)
	}
	req.Header.Del("Content-Digest")
	if hashed && len(body) > 0 {
		sum := sha256.Sum256(body)
		req.Header.Set("Content-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":")
	}
	components := slices.Clone(httpSigDerived)
	var headers []string
	for name := range req.Header {
		if l := strings.ToLower(name); protectedHeader(l) {
			headers = append(headers, l)
		}
	}
	slices.Sort(headers)
	components = append(components, headers...)

	var params strings.Builder
	params.WriteString("(")
	for i, c := range components {
		if i > 0 {
			params.WriteString(" ")
		}
		params.WriteString(strconv.Quote(c))
	}
	fmt.Fprintf(&params, ");created=%d;keyid=%q;alg=%q", s.now().Unix(), s.keyID, s.alg)

	var base strings.Builder
	for _, c := range components {
		fmt.Fprintf(&base, "%q: %s\n", c, componentValue(req, c))
	}
	fmt.Fprintf(&base, "\"@signature-params\": %s", params.String())

	sig, err := s.signBase([]byte(base.String()))
	if err != nil {
		return fmt.Errorf("rfc9421: signing: %w", err)
	}
	req.Header.Set("Signature-Input", s.label+"="+params.String())
	req.Header.Set("Signature", s.label+"=:"+base64.StdEncoding.EncodeToString(sig)+":")
	return nil
}

// componentValue is the value of a covered component (RFC 9421 §2.1, §2.2).
func componentValue(req *http.Request, c string) string {
	switch c {
	case "@method":
		return req.Method
	case "@authority":
		host := req.Host
		if host == "" {
			host = req.URL.Host
		}
		return normalizeAuthority(req.URL.Scheme, host)
	case "@path":
		if p := req.URL.EscapedPath(); p != "" {
			return p
		}
		return "/"
	case "@query":
		return "?" + req.URL.RawQuery
	}
	values := req.Header.Values(c)
	trimmed := make([]string, len(values))
	for i, v := range values {
		trimmed[i] = strings.TrimSpace(v)
	}
	return strings.Join(trimmed, ", ")
}

func (s *httpSigner) signBase(base []byte) ([]byte, error) {
	if s.alg == "ed25519" {
		return s.key.Sign(rand.Reader, base, crypto.Hash(0))
	}
	digest := sha256.Sum256(base)
	der, err := s.key.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		return nil, err
	}
	// RFC 9421 §3.3.4: the signature is r and s as two 32-byte big-endian integers.
	var rs struct{ R, S *big.Int }
	if rest, err := asn1.Unmarshal(der, &rs); err != nil || len(rest) > 0 {
		return nil, fmt.Errorf("the key returned a malformed ECDSA signature")
	}
	out := make([]byte, 64)
	rs.R.FillBytes(out[:32])
	rs.S.FillBytes(out[32:])
	return out, nil
}

func httpSigAlg(pub crypto.PublicKey) (string, error) {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return "ed25519", nil
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return "ecdsa-p256-sha256", nil
		}
		return "", fmt.Errorf("rfc9421: unsupported key type ECDSA %s: want Ed25519 or ECDSA P-256", k.Curve.Params().Name)
	}
	return "", fmt.Errorf("rfc9421: unsupported key type %s: want Ed25519 or ECDSA P-256", keyTypeName(pub))
}

func isPrintableASCII(s string) bool {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return false
		}
	}
	return true
}

func isSFKey(s string) bool {
	if s == "" || (s[0] < 'a' || s[0] > 'z') && s[0] != '*' {
		return false
	}
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789_-.*") == ""
}

// normalizeAuthority is host as RFC 9421 §2.2.3 covers it: lower case, without the
// scheme's default port (RFC 9110 §4.2.3), so that "h:443" and "h" sign the same.
func normalizeAuthority(scheme, host string) string {
	host = strings.ToLower(host)
	switch {
	case strings.EqualFold(scheme, "https"):
		return strings.TrimSuffix(host, ":443")
	case strings.EqualFold(scheme, "http"):
		return strings.TrimSuffix(host, ":80")
	}
	return host
}
