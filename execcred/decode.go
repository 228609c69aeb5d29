package execcred

import (
	"crypto/tls"
	"sync/atomic"
	"time"

	"github.com/kplug/kplug/execcred/wire"
)

// Credential is what a plugin returned: a bearer token, a client certificate, or both; or
// signing material (KEP-6308), alone. A Credential is immutable once returned; compare
// pointers to tell generations apart.
type Credential struct {
	Token string
	// Certificate is the parsed client certificate and key, with Leaf set; nil if none.
	Certificate *tls.Certificate
	// Expiry is when the plugin said the credential expires; zero means never (until a 401).
	Expiry time.Time
	// Proxy is set when the plugin is an exec proxy: requests go through it, Certificate is
	// the credential for the hop to the proxy, and Token is empty.
	Proxy *ProxyConfig
	// HTTPSignature is set when the plugin returned signing material (status.httpSignature)
	// instead of a token or a client certificate: Transport signs each request with it.
	HTTPSignature *Signing

	authorization []string // "Bearer <token>", built once
	certPEM       []byte
	keyPEM        []byte
	seq           uint64 // orders decoded credentials: a larger one was made later
}

// credentials counts decoded credentials, for Credential.seq.
var credentials atomic.Uint64

// CertificatePEM returns the client certificate and key as the plugin returned them (PEM),
// or nil. For an exec proxy they are the credential for the hop to the proxy.
func (c *Credential) CertificatePEM() (cert, key []byte) { return c.certPEM, c.keyPEM }

// bearer returns the Authorization header value for the token.
func (c *Credential) bearer() []string {
	if c.authorization == nil {
		return []string{"Bearer " + c.Token}
	}
	return c.authorization
}

// ExpiredAt reports whether the credential has expired at now: strictly after its expiry,
// as client-go decides. A certificate's NotAfter does not count.
func (c *Credential) ExpiredAt(now time.Time) bool {
	return !c.Expiry.IsZero() && now.After(c.Expiry)
}

// DecodeOutput parses a plugin's stdout into a Credential, accepting and checking what
// client-go accepts (wire.Parse and Status.Check, in client-go's order).
func DecodeOutput(apiVersion string, stdout []byte) (*Credential, error) {
	s, err := wire.Parse(apiVersion, stdout)
	if err != nil {
		return nil, err
	}
	return FromStatus(s)
}

// FromStatus checks a plugin's answer as DecodeOutput does after decoding and returns the
// credential it holds. It is how an in-process plugin's answer enters the pipeline
// (FuncSource).
func FromStatus(s *Status) (*Credential, error) { return fromStatus(s, nil) }

// fromStatus is FromStatus for a client that states the key derivation ladder kd.
func fromStatus(s *Status, kd *wire.KeyDerivation) (*Credential, error) {
	cert, err := s.Check()
	if err != nil {
		return nil, err
	}
	c := &Credential{Token: s.Token, Proxy: s.ProxyConfig, Certificate: cert, seq: credentials.Add(1)}
	if s.HTTPSignature != nil {
		if c.HTTPSignature, err = signingFromStatus(s.HTTPSignature, kd); err != nil {
			return nil, err
		}
	}
	if s.Token != "" {
		c.authorization = []string{"Bearer " + s.Token}
	}
	if s.ExpirationTimestamp != nil {
		c.Expiry = s.ExpirationTimestamp.Time
	}
	if cert != nil {
		c.certPEM, c.keyPEM = []byte(s.ClientCertificateData), []byte(s.ClientKeyData)
	}
	return c, nil
}
