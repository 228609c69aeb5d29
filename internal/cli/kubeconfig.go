package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execplugin"
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

// execPlugin returns the context's exec plugin configuration and the authenticator
// options, with everything beyond client-go turned on, or a nil plugin when the context
// has no exec plugin or static credentials take precedence.
func (o *kubeconfigOptions) execPlugin(g *globals, cfg *rest.Config, stdinUnavailable string) (*execcred.Config, execcred.Options, error) {
	var opts execcred.Options
	if cfg.ExecProvider == nil || execcred.HasStaticCredentials(cfg) {
		return nil, opts, nil
	}
	ec, err := execcred.FromRESTConfig(cfg)
	if err == nil {
		err = ec.Validate()
	}
	if err != nil {
		return nil, opts, invalidConfig(err)
	}
	opts = execcred.Options{
		Host: execcred.Host{
			Runner:                  pluginRunner(g),
			Timeout:                 o.timeout,
			Stdin:                   stdinFile(g),
			StdinUnavailable:        stdinUnavailable != "",
			StdinUnavailableMessage: stdinUnavailable,
		},
		Backoff: execcred.Backoff{Initial: time.Second, Max: time.Minute},
		Logger:  g.log,
	}
	return ec, opts, nil
}

// pluginRunner passes a plugin's stderr to kplug's, where the user sees it as it is
// written (prompts, warnings); errors then do not repeat it.
func pluginRunner(g *globals) *execplugin.Runner {
	return &execplugin.Runner{Stderr: g.io.Err, StderrShown: true}
}

// pluginFailed makes a plugin's usage error (exit code 2: the kubeconfig's exec arguments
// or environment are wrong) kplug's invalid-configuration error, which exits 2 too.
func pluginFailed(err error) error {
	var exit *execplugin.ExitError
	if errors.As(err, &exit) && exit.Code == ExitUsage {
		return invalidConfig(err)
	}
	return err
}
