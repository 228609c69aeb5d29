package execcred

import (
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/pemkey"
)

// Signing is the KEP-6308 signing material of a Credential: a ready signer, the
// certificate it signs under, and the values of the headers it covers. A credential with
// Signing carries neither a token nor a client certificate: Transport signs each request
// instead. The key and the header values (which may be session tokens) never leave the
// process: String, LogValue and MarshalJSON show neither.
type Signing struct {
	Signer *httpsig.Signer
	// Certificate is the leaf the signer's keyid names, or nil for a key named by a key ID.
	Certificate *x509.Certificate
	// Headers are the values of the configured signed headers, X-K8s-Audience among them.
	Headers map[string]string
}

// String names the key and the covered headers, without their values.
func (s *Signing) String() string {
	return fmt.Sprintf("httpSignature{keyid=%s alg=%s signedHeaders=%s}", s.Signer.KeyID(), s.Signer.Algorithm(), strings.Join(s.HeaderNames(), ","))
}

// LogValue is what slog prints for s: String, never the key or the header values.
func (s *Signing) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON writes String, so that a Credential logged or encoded as JSON does not
// carry the header values either.
func (s *Signing) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// HeaderNames returns the names of the signed headers, sorted.
func (s *Signing) HeaderNames() []string {
	names := make([]string, 0, len(s.Headers))
	for name := range s.Headers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// RoundTripper signs each request with s and sends it with next.
func (s *Signing) RoundTripper(next http.RoundTripper) http.RoundTripper {
	return s.Signer.RoundTripper(next)
}

// audienceHint says how each kind of signing material gets its audience.
const (
	pluginAudienceHint = "the plugin must return it in status.httpSignature.signedHeaders (the cluster's audience, as the verifier's requiredSignedHeaders lists it)"
	fileAudienceHint   = "set it in the kubeconfig: httpSignature.signedHeaders: [{name: X-K8s-Audience, value: <the cluster's audience, as the verifier's requiredSignedHeaders lists it>}]"
)

// newSigning checks the material's audience and algorithm and builds its signer. what
// names the material in errors; hint says how to give it an audience.
func newSigning(key httpsig.Key, algorithm string, headers map[string]string, what, hint string) (*Signing, error) {
	if headerValue(headers, httpsig.AudienceHeader) == "" {
		return nil, fmt.Errorf("%s has no value for the signed header %s, which every signature carries against cross-cluster replay (KEP-6308 \"Required signed headers\"): %s", what, httpsig.AudienceHeader, hint)
	}
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{Key: key, Headers: headers})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if algorithm != "" && algorithm != signer.Algorithm() {
		return nil, fmt.Errorf("%s: algorithm %q does not fit the key, which signs with %s", what, algorithm, signer.Algorithm())
	}
	return &Signing{Signer: signer, Certificate: key.Certificate, Headers: headers}, nil
}

// signingFromStatus parses the signing material a plugin returned (checked for its
// shape by wire.Status.Check), for a client that states the ladder kd (nil for none).
// With a ladder, the material must be a secret, which signs through the ladder: the root
// secret, or the rung its stage names. Errors never quote the material.
func signingFromStatus(h *wire.HTTPSignature, kd *wire.KeyDerivation) (*Signing, error) {
	const what = "exec plugin's httpSignature"
	stage, err := h.ParseStage()
	if err != nil {
		return nil, err
	}
	if stage != nil && kd == nil {
		return nil, wire.ErrHMACDerivation
	}
	key := httpsig.Key{KeyID: h.KeyID}
	switch {
	case h.PrivateKey != "":
		if kd != nil {
			return nil, fmt.Errorf("%s is a privateKey, but the kubeconfig's httpSignature states a keyDerivation, which derives from a secret: return secret or secretBase64", what)
		}
		signer, err := pemkey.Parse([]byte(h.PrivateKey))
		if err != nil {
			return nil, fmt.Errorf("%s.privateKey: %w", what, err)
		}
		key.Signer = signer
	case h.Secret != "":
		key.Secret = []byte(h.Secret)
	default:
		secret, err := base64.StdEncoding.DecodeString(h.SecretBase64)
		if err != nil {
			return nil, fmt.Errorf("%s.secretBase64 is not standard base64", what)
		}
		key.Secret = secret
	}
	if kd != nil {
		d := &httpsig.Derivation{Ladder: ladderOf(kd), Name: h.KeyID}
		if stage != nil {
			d.From, d.Scope = stage.From, stage.Scope
		}
		key.Derivation, key.KeyID = d, ""
	}
	if h.Certificate != "" {
		leaf, err := leafOf([]byte(h.Certificate), key.Signer)
		if err != nil {
			return nil, fmt.Errorf("%s.certificate: %w", what, err)
		}
		key.Certificate = leaf
	}
	return newSigning(key, h.Algorithm, h.SignedHeaders, what, pluginAudienceHint)
}

// headerValue looks a header up by its case-insensitive name.
func headerValue(headers map[string]string, name string) string {
	for k, v := range headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// leafOf returns the first certificate of the PEM data b, which must be key's. The
// chain after it, if any, is not sent: Signature-Certificate carries the leaf alone
// (KEP-6308 "Signature-Certificate"), and the verifier holds the authority.
func leafOf(b []byte, key crypto.Signer) (*x509.Certificate, error) {
	leaf, err := pemkey.Certificate(b)
	if err != nil {
		return nil, err
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(leaf.PublicKey) {
		return nil, fmt.Errorf("the certificate (subject %q) is not for the private key", leaf.Subject.String())
	}
	return leaf, nil
}
