package execcred

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execcred/plugin"
	"github.com/kplug/kplug/execcred/wire"
)

// FuncSource adapts a plugin function (execcred/plugin.Func) to a Source, so that a
// program can use a plugin in-process, with no process to run: each call of Credential is
// one call of f, whose answer is checked as a client checks a plugin's output. f is told
// info on every call, as a client would tell it in KUBERNETES_EXEC_INFO (an empty
// APIVersion means v1), and, when asked to replace a credential the server rejected, the
// server's answer in Response, as a v1alpha1 client sends it. FromClient is true. Put the
// source under the decorators like any other. When info.HTTPSignature states a key
// derivation ladder, a secret f returns with a stage is derived through it, as a
// kubeconfig's keyDerivation has a plugin's secret derived.
func FuncSource(f plugin.Func, info plugin.Info) Source {
	if info.APIVersion == "" {
		info.APIVersion = V1
	}
	info.FromClient = true
	return SourceFunc(func(ctx context.Context, rejected *Rejection) (*Credential, error) {
		in := info
		if rejected != nil {
			in.Response = rejected.Response
		}
		status, err := f(ctx, &in)
		if err != nil {
			return nil, err
		}
		if status == nil {
			return nil, errors.New("plugin: the plugin function returned no credential")
		}
		var kd *wire.KeyDerivation // the ladder the function was told, if any
		if in.HTTPSignature != nil {
			kd = in.HTTPSignature.KeyDerivation
		}
		cred, err := fromStatus(status, kd)
		if err != nil {
			return nil, fmt.Errorf("plugin: %w", err)
		}
		return cred, nil
	})
}

// ClusterConfig returns an anonymous client configuration for the cluster a client told a
// plugin about (server, CA, TLS server name, proxy), to let the plugin call the API server
// or learn its address. It fails when the kubeconfig did not set provideClusterInfo.
func ClusterConfig(info *plugin.Info) (*rest.Config, error) {
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
