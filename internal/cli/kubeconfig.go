package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kplug/kplug/execcred"
)

// kubeconfigOptions are the flags of commands that act as a client of a kubeconfig context.
type kubeconfigOptions struct {
	path    string
	context string
	timeout time.Duration
}

func (o *kubeconfigOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.path, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	cmd.Flags().StringVar(&o.context, "context", "", "kubeconfig context (default: the current context)")
	cmd.Flags().DurationVar(&o.timeout, "plugin-timeout", time.Minute, "kill a non-interactive exec plugin that runs longer (0: no limit)")
}

// restConfig loads the context as kubectl would: KUBECONFIG merging, relative paths
// against each file's directory. An unusable kubeconfig is a configuration error (exit 2).
func (o *kubeconfigOptions) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.path
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.context}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, invalidConfig(fmt.Errorf("loading kubeconfig: %w", err))
	}
	return cfg, nil
}

// authenticator returns an Authenticator for the context's exec plugin, with everything
// beyond client-go turned on, or nil when the context has no exec plugin or static
// credentials take precedence.
func (o *kubeconfigOptions) authenticator(g *globals, cfg *rest.Config, stdinUnavailable, lockFile string) (*execcred.Authenticator, error) {
	if cfg.ExecProvider == nil || execcred.HasStaticCredentials(cfg) {
		return nil, nil
	}
	ec, err := execcred.FromRESTConfig(cfg)
	if err != nil {
		return nil, invalidConfig(err)
	}
	ec.LockFilePath = lockFile
	host := execcred.Host{
		Timeout:                 o.timeout,
		Stdin:                   stdinFile(g),
		StdinUnavailable:        stdinUnavailable != "",
		StdinUnavailableMessage: stdinUnavailable,
	}
	a, err := execcred.New(*ec, execcred.Options{
		Host:    host,
		Backoff: execcred.Backoff{Initial: time.Second, Max: time.Minute},
		Logger:  g.log,
	})
	if err != nil {
		return nil, invalidConfig(err)
	}
	return a, nil
}
