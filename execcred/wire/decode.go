package wire

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

var utf8BOM = []byte("\xef\xbb\xbf")

// Decode parses a plugin's stdout and checks it as client-go does (Parse, then
// Status.Check), returning the status of a valid answer.
func Decode(apiVersion string, stdout []byte) (*Status, error) {
	s, err := Parse(apiVersion, stdout)
	if err != nil {
		return nil, err
	}
	if _, err := s.Check(); err != nil {
		return nil, err
	}
	return s, nil
}

// Parse decodes a plugin's stdout, accepting what client-go accepts: JSON or YAML, a UTF-8
// byte order mark, unknown fields (ignored), kind omitted. Keys are case-sensitive and the
// apiVersion must equal the configured one. Errors come in client-go's order: decoding,
// version, then a missing status; Status.Check continues from there.
func Parse(apiVersion string, stdout []byte) (*Status, error) {
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
	if out.Status != nil {
		out.Status.Unknown = unknownFields(data)
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
	return out.Status, nil
}

// Check checks a plugin's answer as client-go does after decoding (a token or a
// certificate, certificate and key together, an exec proxy's fields, then the PEM data)
// and returns the client certificate, with Leaf set, or nil when there is none. An answer
// with signing material (HTTPSignature) is checked for its shape only, and has no client
// certificate; its keys are parsed by the runtime that uses them.
func (s *Status) Check() (*tls.Certificate, error) {
	if s.HTTPSignature != nil {
		return nil, s.HTTPSignature.check(s)
	}
	if s.Token == "" && s.ClientCertificateData == "" && s.ClientKeyData == "" {
		return nil, errors.New("exec plugin didn't return a token or cert/key pair")
	}
	if (s.ClientCertificateData == "") != (s.ClientKeyData == "") {
		return nil, errors.New("exec plugin returned only certificate or key, not both")
	}
	if s.ProxyConfig != nil {
		if err := s.checkProxy(); err != nil {
			return nil, err
		}
	}
	if s.ClientCertificateData == "" {
		return nil, nil
	}
	cert, err := tls.X509KeyPair([]byte(s.ClientCertificateData), []byte(s.ClientKeyData))
	if err != nil {
		return nil, fmt.Errorf("failed parsing client key/certificate: %w", err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("failed parsing client leaf certificate: %w", err)
		}
	}
	return &cert, nil
}

// checkProxy checks an exec proxy answer: a unix socket URL, the proxy's CA, and the
// client certificate for the hop to the proxy.
func (s *Status) checkProxy() error {
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

// unknownFields lists the status fields of a decoded object that Status does not know.
func unknownFields(data []byte) []string {
	var raw struct {
		Status map[string]any `json:"status"`
	}
	if kjson.UnmarshalCaseSensitivePreserveInts(data, &raw) != nil {
		return nil
	}
	var unknown []string
	for name := range raw.Status {
		if !slices.Contains(statusFields, name) {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	return unknown
}
