package execcred

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The API group of ExecCredential and the versions this package speaks.
const (
	Group    = "client.authentication.k8s.io"
	V1       = Group + "/v1"
	V1beta1  = Group + "/v1beta1"
	V1alpha1 = Group + "/v1alpha1" // removed from client-go in 1.24; supported here
	Kind     = "ExecCredential"
)

// InfoEnv is the environment variable carrying the ExecCredential input to the plugin.
const InfoEnv = "KUBERNETES_EXEC_INFO"

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
	ExpirationTimestamp   *metav1.Time `json:"expirationTimestamp,omitempty"`
	Token                 string       `json:"token,omitempty"`
	ClientCertificateData string       `json:"clientCertificateData,omitempty"`
	ClientKeyData         string       `json:"clientKeyData,omitempty"`
	// ProxyConfig is the exec proxy extension (KEP-2718, docs/exec-proxy.md): the client
	// sends its API traffic through the proxy at URL, and the client certificate above is
	// its credential for that hop, not for the API server.
	ProxyConfig *ProxyConfig `json:"proxyConfig,omitempty"`
}

// ProxyConfig says where an exec proxy listens and how to trust it.
type ProxyConfig struct {
	URL                      string `json:"url"` // unix:///absolute/path.sock
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
}

// specV1 is the spec of v1 and v1beta1: interactive is always present. lockFilePath is the
// exec proxy extension; client-go never sends it.
type specV1 struct {
	Cluster      *Cluster `json:"cluster,omitempty"`
	Interactive  bool     `json:"interactive"`
	LockFilePath string   `json:"lockFilePath,omitempty"`
}

// specV1alpha1 is the spec of the original design: interactive only when true, and the
// response to a rejected credential.
type specV1alpha1 struct {
	Response    *Response `json:"response,omitempty"`
	Interactive bool      `json:"interactive,omitempty"`
}

// ExecCredential is the wire object, input and output, in any version.
type ExecCredential struct {
	Kind       string  `json:"kind"`
	APIVersion string  `json:"apiVersion"`
	Spec       any     `json:"spec"`
	Status     *Status `json:"status,omitempty"`
}

func knownVersion(v string) bool { return v == V1 || v == V1beta1 || v == V1alpha1 }
