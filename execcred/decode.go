package execcred

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Credential is what a plugin returned: a bearer token, a client certificate, or both.
// A Credential is immutable once returned; compare pointers to tell generations apart.
type Credential struct {
	Token string
	// Certificate is the parsed client certificate and key, with Leaf set; nil if none.
	Certificate *tls.Certificate
	// Expiry is when the plugin said the credential expires; zero means never (until a 401).
	Expiry time.Time
	// Proxy is set when the plugin is an exec proxy: requests go through it, Certificate is
	// the credential for the hop to the proxy, and Token is empty.
	Proxy *ProxyConfig

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

var utf8BOM = []byte("\xef\xbb\xbf")

// DecodeOutput parses a plugin's stdout into a Credential, accepting what client-go accepts:
// JSON or YAML, a UTF-8 byte order mark, unknown fields (ignored), kind omitted. Keys are
// case-sensitive and the apiVersion must equal the configured one. Errors are checked in
// client-go's order: decoding, version, status, token or certificate, certificate and key
// together, then the PEM data.
func DecodeOutput(apiVersion string, stdout []byte) (*Credential, error) {
	data := bytes.TrimPrefix(stdout, utf8BOM)
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("plugin wrote nothing to stdout; it must print an ExecCredential with apiVersion %s", apiVersion)
	}
	if !isJSONObject(data) {
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("decoding stdout: not JSON or YAML: %w", err)
		}
		data = j
	}
	if err := singleJSONValue(data); err != nil {
		return nil, fmt.Errorf("decoding stdout: %w", err)
	}
	var out struct {
		Kind       string  `json:"kind"`
		APIVersion string  `json:"apiVersion"`
		Status     *Status `json:"status"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &out); err != nil {
		return nil, fmt.Errorf("decoding stdout: %w", err)
	}
	switch {
	case out.APIVersion == "":
		return nil, fmt.Errorf("plugin returned an object without apiVersion; it must be %s", apiVersion)
	case out.APIVersion != apiVersion:
		return nil, fmt.Errorf("exec plugin is configured to use API version %s, plugin returned version %s", apiVersion, out.APIVersion)
	case out.Kind != "" && out.Kind != Kind:
		return nil, fmt.Errorf("decoding stdout: plugin returned kind %q, want %s", out.Kind, Kind)
	case out.Status == nil:
		return nil, errors.New("exec plugin didn't return a status field")
	}
	return credentialFrom(out.Status)
}

// Credential checks a plugin's answer as DecodeOutput does after decoding (a token or a
// certificate, certificate and key together, the PEM, an exec proxy's fields) and returns
// the credential it holds. It is how an in-process plugin's answer enters the pipeline
// (execcred/plugin.Source).
func (s *Status) Credential() (*Credential, error) { return credentialFrom(s) }

func credentialFrom(s *Status) (*Credential, error) {
	if s.Token == "" && s.ClientCertificateData == "" && s.ClientKeyData == "" {
		return nil, errors.New("exec plugin didn't return a token or cert/key pair")
	}
	if (s.ClientCertificateData == "") != (s.ClientKeyData == "") {
		return nil, errors.New("exec plugin returned only certificate or key, not both")
	}
	if s.ProxyConfig != nil {
		if err := validateProxy(s); err != nil {
			return nil, err
		}
	}
	c := &Credential{Token: s.Token, Proxy: s.ProxyConfig, seq: credentials.Add(1)}
	if s.Token != "" {
		c.authorization = []string{"Bearer " + s.Token}
	}
	if s.ExpirationTimestamp != nil {
		c.Expiry = s.ExpirationTimestamp.Time
	}
	if s.ClientCertificateData != "" {
		cert, err := tls.X509KeyPair([]byte(s.ClientCertificateData), []byte(s.ClientKeyData))
		if err != nil {
			return nil, fmt.Errorf("failed parsing client key/certificate: %w", err)
		}
		if cert.Leaf == nil {
			if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				return nil, fmt.Errorf("failed parsing client leaf certificate: %w", err)
			}
		}
		c.Certificate = &cert
		c.certPEM, c.keyPEM = []byte(s.ClientCertificateData), []byte(s.ClientKeyData)
	}
	return c, nil
}

// validateProxy checks an exec proxy answer: a unix socket URL, the proxy's CA, and the
// client certificate for the hop to the proxy.
func validateProxy(s *Status) error {
	p := s.ProxyConfig
	switch {
	case !strings.HasPrefix(p.URL, "unix:///"):
		return fmt.Errorf("exec proxy: proxyConfig.url %q must be unix:///<absolute path>", p.URL)
	case len(p.CertificateAuthorityData) == 0:
		return errors.New("exec proxy: proxyConfig.certificate-authority-data is empty")
	case s.ClientCertificateData == "":
		return errors.New("exec proxy: proxyConfig needs clientCertificateData and clientKeyData, the credential for the hop to the proxy")
	case s.Token != "":
		return errors.New("exec proxy: a proxy answer must not carry a token; the proxy authenticates to the API server")
	}
	return nil
}

func isJSONObject(data []byte) bool {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '{'
}

// singleJSONValue rejects trailing data after the object, as the apimachinery decoder does.
func singleJSONValue(data []byte) error {
	var v any
	dec := kjson.NewDecoderCaseSensitivePreserveInts(bytes.NewReader(data))
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if _, ok := v.(map[string]any); !ok {
		return fmt.Errorf("want a JSON object, got %T", v)
	}
	if dec.More() {
		return errors.New("unexpected data after the ExecCredential object")
	}
	return nil
}
