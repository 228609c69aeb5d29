package wire

import (
	"encoding/json"
	"time"
)

// The API group of ExecCredential and the versions kplug speaks.
const (
	Group    = "client.authentication.k8s.io"
	V1       = Group + "/v1"
	V1beta1  = Group + "/v1beta1"
	V1alpha1 = Group + "/v1alpha1" // removed from client-go in 1.24; supported by kplug
	Kind     = "ExecCredential"
)

// InfoEnv is the environment variable carrying the ExecCredential input to the plugin.
const InfoEnv = "KUBERNETES_EXEC_INFO"

// KnownVersion reports whether v is one of V1, V1beta1 and V1alpha1.
func KnownVersion(v string) bool { return v == V1 || v == V1beta1 || v == V1alpha1 }

// Cluster is what a plugin learns about the cluster when provideClusterInfo is set
// (v1beta1 and v1 only). Field names and order are those of the wire format.
type Cluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name,omitempty"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify,omitempty"`
	CertificateAuthorityData []byte `json:"certificate-authority-data,omitempty"`
	ProxyURL                 string `json:"proxy-url,omitempty"`
	DisableCompression       bool   `json:"disable-compression,omitempty"`
	// Config is the client.authentication.k8s.io/exec cluster extension; client-go sends
	// "config":null when there is none.
	Config json.RawMessage `json:"config"`
}

// Response describes the 401 that triggered a refresh; only v1alpha1 sends it.
type Response struct {
	Header map[string][]string `json:"header,omitempty"`
	Code   int32               `json:"code,omitempty"`
}

// Status is the plugin's answer.
type Status struct {
	ExpirationTimestamp   *Time  `json:"expirationTimestamp,omitempty"`
	Token                 string `json:"token,omitempty"`
	ClientCertificateData string `json:"clientCertificateData,omitempty"`
	ClientKeyData         string `json:"clientKeyData,omitempty"`
	// ProxyConfig is the exec proxy extension (KEP-2718, docs/exec-proxy.md): the client
	// sends its API traffic through the proxy at URL, and the client certificate above is
	// its credential for that hop, not for the API server.
	ProxyConfig *ProxyConfig `json:"proxyConfig,omitempty"`
	// HTTPSignature is signing material (KEP-6308), returned instead of a token or a client
	// certificate. It is never stored nor logged.
	HTTPSignature *HTTPSignature `json:"httpSignature,omitempty"`
	// Unknown lists, sorted, the status fields Parse found and this package does not know
	// (clients ignore them): a newer protocol's. `kplug exec-cache` never stores an answer
	// that has any.
	Unknown []string `json:"-"`
}

// statusFields are the status fields Status knows.
var statusFields = []string{"expirationTimestamp", "token", "clientCertificateData", "clientKeyData", "proxyConfig", "httpSignature"}

// ProxyServerName is the name an exec proxy's serving certificate carries and its client
// verifies: a unix socket URL has no host name to check the certificate against.
const ProxyServerName = "kplug-exec-proxy"

// ProxyConfig says where an exec proxy listens and how to trust it: its certificate is
// issued by CertificateAuthorityData for ProxyServerName.
type ProxyConfig struct {
	URL                      string `json:"url"` // unix:///absolute/path.sock
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
}

// ExecCredential is the wire object, input and output, in any version.
type ExecCredential struct {
	Kind       string  `json:"kind"`
	APIVersion string  `json:"apiVersion"`
	Spec       any     `json:"spec"`
	Status     *Status `json:"status,omitempty"`
}

// Time is a timestamp as Kubernetes API objects write it (metav1.Time): RFC 3339 in UTC,
// to the second, and null for the zero time.
type Time struct{ time.Time }

// NewTime returns t as a Time.
func NewTime(t time.Time) Time { return Time{Time: t} }

// MarshalJSON writes the time as metav1.Time does.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(time.RFC3339))
}

// UnmarshalJSON reads what metav1.Time reads: null, or an RFC 3339 string.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		t.Time = time.Time{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	parsed, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return err
	}
	t.Time = parsed.Local()
	return nil
}
