package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// HTTPSignatureRequest is spec.httpSignature, what a client configured to sign requests
// (KEP-6308 "Client configuration": a kubeconfig user with an httpSignature block) tells
// its plugin the signing material has to satisfy. Nothing in it is secret.
type HTTPSignatureRequest struct {
	// Algorithm is the signature algorithm the client is configured for (the IANA "HTTP
	// Signature Algorithms" name); empty when the key decides.
	Algorithm string `json:"algorithm,omitempty"`
	// SignedHeaders names the headers the client covers; the plugin returns a value for
	// each in status.httpSignature.signedHeaders.
	SignedHeaders []HTTPSignatureHeader `json:"signedHeaders,omitempty"`
}

// HTTPSignatureHeader names a header a signature covers.
type HTTPSignatureHeader struct {
	Name string `json:"name"`
}

// HTTPSignature is status.httpSignature: material for signing each request, returned
// instead of a token or a client certificate (KEP-6308 "Client configuration"). It is used
// in the client's memory only: never cached, never logged.
type HTTPSignature struct {
	// KeyID names the key to a server that resolves key IDs; a certificate key's keyid is
	// derived from the certificate instead.
	KeyID string `json:"keyID,omitempty"`
	// Algorithm is the signature algorithm; empty means the one the key's type implies.
	Algorithm string `json:"algorithm,omitempty"`
	// PrivateKey is a PEM private key (PKCS#8, PKCS#1 or SEC 1).
	PrivateKey string `json:"privateKey,omitempty"`
	// Certificate is a kplug extension, pending the KEP's open question on certificate
	// keys from plugins: the PEM certificate of PrivateKey, leaf first, optionally followed
	// by its chain. With it the signature's keyid is the certificate's digest and each
	// request carries the leaf in Signature-Certificate.
	Certificate string `json:"certificate,omitempty"`
	// Secret and SecretBase64 are a shared hmac-sha256 secret, as UTF-8 text or base64.
	Secret       string `json:"secret,omitempty"`
	SecretBase64 string `json:"secretBase64,omitempty"`
	// Stage places the secret on a key derivation ladder, which kplug does not implement
	// yet: an answer that sets it is refused.
	Stage json.RawMessage `json:"stage,omitempty"`
	// SignedHeaders are the values of the headers the signature covers, by name.
	SignedHeaders map[string]string `json:"signedHeaders,omitempty"`
}

// ErrHMACDerivation says a plugin returned material for the KEP-6308 key derivation
// ladder, which kplug does not implement yet.
var ErrHMACDerivation = errors.New("exec plugin returned httpSignature.stage: HMAC key derivation (KEP-6308 hmac-ladder) is not supported yet; return the signing key itself as secret or secretBase64, or an asymmetric privateKey")

// check checks what can be checked of signing material without parsing keys: one kind
// of key, what each kind needs, and nothing that transits beside it.
func (h *HTTPSignature) check(s *Status) error {
	if s.Token != "" || s.ClientCertificateData != "" || s.ClientKeyData != "" || s.ProxyConfig != nil {
		return errors.New("exec plugin returned httpSignature together with a token, client certificate or proxyConfig: a status may carry a signature or a credential that transits, never both")
	}
	if len(h.Stage) > 0 && string(h.Stage) != "null" {
		return ErrHMACDerivation
	}
	kinds := 0
	for _, v := range []string{h.PrivateKey, h.Secret, h.SecretBase64} {
		if v != "" {
			kinds++
		}
	}
	switch {
	case kinds != 1:
		return fmt.Errorf("exec plugin returned httpSignature with %d of privateKey, secret and secretBase64: exactly one must be set", kinds)
	case h.Certificate != "" && h.PrivateKey == "":
		return errors.New("exec plugin returned httpSignature.certificate without privateKey: a certificate identifies an asymmetric key")
	case h.Certificate != "" && h.KeyID != "":
		return errors.New("exec plugin returned httpSignature with both certificate and keyID: a certificate key's keyid is the certificate's digest")
	case h.Certificate == "" && h.KeyID == "":
		return errors.New("exec plugin returned httpSignature without keyID: a key without a certificate needs the name the server knows it by")
	}
	for name := range h.SignedHeaders {
		if strings.TrimSpace(name) == "" {
			return errors.New("exec plugin returned httpSignature.signedHeaders with an empty header name")
		}
	}
	return nil
}
