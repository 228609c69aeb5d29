package execcred

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execcred/kuberc"
	"github.com/kplug/kplug/execcred/wire"
)

// InteractiveMode says whether a plugin may use the terminal.
type InteractiveMode string

// The interactive modes of the kubeconfig exec block.
const (
	Never       InteractiveMode = "Never"
	IfAvailable InteractiveMode = "IfAvailable"
	Always      InteractiveMode = "Always"
)

// Config describes one exec credential plugin, as a kubeconfig user's exec block does.
type Config struct {
	Command string
	Args    []string
	// Env entries are NAME=VALUE; they override the host environment.
	Env         []string
	APIVersion  string
	InstallHint string
	// InteractiveMode is required. clientcmd defaults it to IfAvailable for v1beta1 (and
	// here for v1alpha1); v1 configs must set it.
	InteractiveMode InteractiveMode
	// Cluster, if set, is sent to v1beta1 and v1 plugins (provideClusterInfo).
	Cluster *Cluster
	// BaseDir anchors a relative Command. clientcmd already makes a kubeconfig's relative
	// command absolute against the kubeconfig's directory.
	BaseDir string
	// LockFilePath, if set, is sent as spec.lockFilePath (v1beta1 and v1): the client
	// supports exec proxies and holds an exclusive lock on this file while it lives.
	LockFilePath string
	// Policy is the credential plugin policy (kuberc's credentialPluginPolicy and
	// credentialPluginAllowlist), checked before each run as client-go checks it; the zero
	// Policy allows every plugin. kuberc.Load reads it as kubectl does; FromRESTConfig
	// takes it from rest.Config.ExecProvider.PluginPolicy, where kubectl puts it.
	Policy kuberc.Policy
	// HTTPSignature, if set, is sent as spec.httpSignature: the client signs requests
	// (KEP-6308) and the plugin must answer with signing material that has a value for
	// every header it names. NewForRESTConfig sets it from Options.HTTPSignature.
	HTTPSignature *wire.HTTPSignatureRequest
}

// ConfigError says a configuration is invalid, so that no plugin ran: a Config that
// Validate refuses, or a *rest.Config FromRESTConfig cannot read. Programs report it as
// a configuration error (kplug exits 2).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Validate checks the config as client-go does when it builds an authenticator. Its
// errors are *ConfigError.
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return &ConfigError{Err: err}
	}
	return nil
}

func (c *Config) validate() error {
	switch {
	case !knownVersion(c.APIVersion):
		return fmt.Errorf("exec plugin: invalid apiVersion %q", c.APIVersion)
	case c.Command == "":
		return errors.New("exec plugin: command must be specified")
	}
	switch c.InteractiveMode {
	case Never, IfAvailable, Always:
	default:
		return fmt.Errorf("exec plugin: invalid interactiveMode %q: want Never, IfAvailable or Always", c.InteractiveMode)
	}
	for _, kv := range c.Env {
		if name, _, _ := strings.Cut(kv, "="); name == "" {
			return errors.New("exec plugin: env variable name must be specified")
		}
	}
	return c.Policy.Validate() // "invalid plugin policy: ...", as client-go says it
}

// FromRESTConfig builds a Config from a client-go config whose ExecProvider is set, e.g. one
// clientcmd loaded from a kubeconfig, and validates it. The cluster information is built as
// client-go builds it: the CA from CAData or CAFile, the proxy URL from calling cfg.Proxy.
// Its errors are *ConfigError.
func FromRESTConfig(cfg *rest.Config) (*Config, error) {
	c, err := fromRESTConfig(cfg)
	if err != nil {
		var ce *ConfigError
		if !errors.As(err, &ce) {
			err = &ConfigError{Err: err}
		}
		return nil, err
	}
	return c, nil
}

func fromRESTConfig(cfg *rest.Config) (*Config, error) {
	ep := cfg.ExecProvider
	if ep == nil {
		return nil, errors.New("exec plugin: the config has no exec provider")
	}
	c := &Config{
		Command:         ep.Command,
		Args:            ep.Args,
		APIVersion:      ep.APIVersion,
		InstallHint:     ep.InstallHint,
		InteractiveMode: InteractiveMode(ep.InteractiveMode),
		Policy:          policyOf(ep.PluginPolicy),
	}
	if c.InteractiveMode == "" && (c.APIVersion == V1beta1 || c.APIVersion == V1alpha1) {
		c.InteractiveMode = IfAvailable
	}
	for _, e := range ep.Env {
		c.Env = append(c.Env, e.Name+"="+e.Value)
	}
	if ep.ProvideClusterInfo {
		cl, err := rest.ConfigToExecCluster(cfg)
		if err != nil {
			return nil, err
		}
		c.Cluster = &Cluster{
			Server:                   cl.Server,
			TLSServerName:            cl.TLSServerName,
			InsecureSkipTLSVerify:    cl.InsecureSkipTLSVerify,
			CertificateAuthorityData: cl.CertificateAuthorityData,
			ProxyURL:                 cl.ProxyURL,
			DisableCompression:       cl.DisableCompression,
		}
		if c.Cluster.Config, err = extensionJSON(cl.Config); err != nil {
			return nil, err
		}
	}
	return c, c.Validate()
}

func extensionJSON(obj runtime.Object) (json.RawMessage, error) {
	switch o := obj.(type) {
	case nil:
		return nil, nil
	case *runtime.Unknown:
		return o.Raw, nil
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("exec plugin: encoding the cluster's exec extension: %w", err)
	}
	return b, nil
}
