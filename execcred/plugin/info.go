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
	"github.com/kplug/kplug/execcred/wire"
)

// Info is what the client told the plugin (package wire documents it).
type Info = wire.Info

// LoadInfo parses the value of KUBERNETES_EXEC_INFO. Pass os.Getenv(execcred.InfoEnv).
func LoadInfo(value string) (*Info, error) { return wire.LoadInfo(value) }

// RESTConfig returns an anonymous client configuration for the cluster the client is
// talking to (server, CA, TLS server name, proxy), to let a plugin call the API server or
// learn its address. It fails when the kubeconfig did not set provideClusterInfo.
func RESTConfig(info *Info) (*rest.Config, error) {
	c := info.Cluster
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
