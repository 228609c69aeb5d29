package wire

import (
	"bytes"
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
	// KeyDerivation is the kubeconfig's key derivation ladder: the plugin returns a
	// secret (the ladder's root, or a rung of it placed by status.httpSignature.stage)
	// and a value for each scope step, and the client derives each request's key.
	KeyDerivation *KeyDerivation `json:"keyDerivation,omitempty"`
}

// KeyDerivation is a KEP-6308 key derivation ladder as kubeconfigs and plugins state it
// (kind hmac-ladder): nothing in it is secret.
type KeyDerivation struct {
	Kind         string              `json:"kind"`
	Hash         string              `json:"hash"`
	SecretPrefix string              `json:"secretPrefix,omitempty"`
	Steps        []KeyDerivationStep `json:"steps"`
}

// KeyDerivationStep is one rung of a ladder: exactly one of Date, Scope and Literal.
type KeyDerivationStep struct {
	Name    string `json:"name"`
	Date    string `json:"date,omitempty"`
	Scope   bool   `json:"scope,omitempty"`
	Literal string `json:"literal,omitempty"`
}

// HTTPSignatureStage is status.httpSignature.stage: where on the client's ladder the
// returned secret sits (From, the step it is the output of; empty for the root secret),
// and the values of the ladder's scope steps.
type HTTPSignatureStage struct {
	From  string            `json:"from,omitempty"`
	Scope map[string]string `json:"scope,omitempty"`
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
	// Stage places the secret on the client's key derivation ladder (an
	// HTTPSignatureStage; ParseStage reads it). Only a secret has a stage, and only a
	// client with a ladder accepts one.
	Stage json.RawMessage `json:"stage,omitempty"`
	// SignedHeaders are the values of the headers the signature covers, by name.
	SignedHeaders map[string]string `json:"signedHeaders,omitempty"`
}

// ErrHMACDerivation says a plugin placed its secret on a key derivation ladder
// (status.httpSignature.stage) for a client that states none.
var ErrHMACDerivation = errors.New("exec plugin returned httpSignature.stage, but the kubeconfig's httpSignature states no keyDerivation to place the secret on: add the ladder the plugin derives through, or return the signing key itself")

// ParseStage reads the stage, if any; unknown fields are refused, since a stage the
// client misreads derives a key no one can explain.
func (h *HTTPSignature) ParseStage() (*HTTPSignatureStage, error) {
	if len(h.Stage) == 0 || string(h.Stage) == "null" {
		return nil, nil
	}
	var st HTTPSignatureStage
	dec := json.NewDecoder(bytes.NewReader(h.Stage))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("exec plugin returned a malformed httpSignature.stage: %w", err)
	}
	return &st, nil
}

// check checks what can be checked of signing material without parsing keys: one kind
// of key, what each kind needs, and nothing that transits beside it.
func (h *HTTPSignature) check(s *Status) error {
	if s.Token != "" || s.ClientCertificateData != "" || s.ClientKeyData != "" || s.ProxyConfig != nil {
		return errors.New("exec plugin returned httpSignature together with a token, client certificate or proxyConfig: a status may carry a signature or a credential that transits, never both")
	}
	if st, err := h.ParseStage(); err != nil {
		return err
	} else if st != nil && h.PrivateKey != "" {
		return errors.New("exec plugin returned httpSignature.stage with a privateKey: a stage places a shared secret on a key derivation ladder")
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
