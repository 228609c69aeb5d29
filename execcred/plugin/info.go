package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execcred"
)

// Info is what the client told the plugin.
type Info struct {
	// APIVersion is the version the client expects the answer in.
	APIVersion  string
	Interactive bool
	// Cluster is set when the kubeconfig has provideClusterInfo (v1beta1 and v1).
	Cluster *execcred.Cluster
	// Response is set by v1alpha1 clients when the last credential was rejected.
	Response *execcred.Response
	// LockFilePath is set by clients that support exec proxies (KEP-2718, docs/exec-proxy.md):
	// the client holds an exclusive lock on this file while it lives, and a plugin that
	// answers with a proxy serves until it can take the lock.
	LockFilePath string
	// FromClient is false when KUBERNETES_EXEC_INFO was empty: a very old client, or the
	// plugin run by hand. APIVersion is then v1beta1, which every client since 1.11 reads.
	FromClient bool
}

// LoadInfo parses the value of KUBERNETES_EXEC_INFO. Pass os.Getenv(execcred.InfoEnv).
func LoadInfo(value string) (*Info, error) {
	if value == "" {
		return &Info{APIVersion: execcred.V1beta1}, nil
	}
	var in struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Spec       struct {
			Cluster      *execcred.Cluster  `json:"cluster"`
			Interactive  bool               `json:"interactive"`
			Response     *execcred.Response `json:"response"`
			LockFilePath string             `json:"lockFilePath"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(value), &in); err != nil {
		return nil, fmt.Errorf("plugin: %s is not an ExecCredential: %w", execcred.InfoEnv, err)
	}
	switch in.APIVersion {
	case execcred.V1, execcred.V1beta1, execcred.V1alpha1:
	default:
		return nil, fmt.Errorf("plugin: %s has unsupported apiVersion %q", execcred.InfoEnv, in.APIVersion)
	}
	if in.Kind != execcred.Kind {
		return nil, fmt.Errorf("plugin: %s has kind %q, want %s", execcred.InfoEnv, in.Kind, execcred.Kind)
	}
	return &Info{
		APIVersion:   in.APIVersion,
		Interactive:  in.Spec.Interactive,
		Cluster:      in.Spec.Cluster,
		Response:     in.Spec.Response,
		LockFilePath: in.Spec.LockFilePath,
		FromClient:   true,
	}, nil
}

// RESTConfig returns an anonymous client configuration for the cluster the client is
// talking to (server, CA, TLS server name, proxy), to let a plugin call the API server or
// learn its address. It fails when the kubeconfig did not set provideClusterInfo.
func (i *Info) RESTConfig() (*rest.Config, error) {
	c := i.Cluster
	if c == nil {
		return nil, errors.New("plugin: the client sent no cluster information; set provideClusterInfo: true in the kubeconfig's exec block")
	}
	cfg := &rest.Config{
		Host: c.Server,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: c.TLSServerName,
			Insecure:   c.InsecureSkipTLSVerify,
			CAData:     c.CertificateAuthorityData,
		},
		DisableCompression: c.DisableCompression,
	}
	if c.ProxyURL != "" {
		u, err := url.Parse(c.ProxyURL)
		if err != nil {
			return nil, fmt.Errorf("plugin: cluster proxy-url: %w", err)
		}
		cfg.Proxy = http.ProxyURL(u)
	}
	return cfg, nil
}

// Write prints status as an ExecCredential in the version the client asked for.
func Write(w io.Writer, info *Info, status *execcred.Status) error {
	if status == nil || (status.Token == "" && status.ClientCertificateData == "") {
		return errors.New("plugin: a credential needs a token or a client certificate")
	}
	out := execcred.ExecCredential{Kind: execcred.Kind, APIVersion: info.APIVersion, Spec: struct{}{}, Status: status}
	enc := json.NewEncoder(w)
	return enc.Encode(out)
}
