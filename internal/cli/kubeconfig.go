package cli

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/keys"
)

// kubeconfigOptions are the flags of commands that act as a client of a kubeconfig context.
type kubeconfigOptions struct {
	path    string
	context string
	timeout time.Duration
	kuberc  kubercOptions
}

func (o *kubeconfigOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.path, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	cmd.Flags().StringVar(&o.context, "context", "", "kubeconfig context (default: the current context)")
	cmd.Flags().DurationVar(&o.timeout, "plugin-timeout", time.Minute, "kill a non-interactive exec plugin that runs longer (0: no limit)")
	o.kuberc.AddFlags(cmd.Flags())
}

// restConfig loads the context as kubectl would: KUBECONFIG merging, relative paths
// against each file's directory, and kuberc's credential plugin policy on the exec
// provider, where kplug's runtime and client-go's both enforce it. An unusable kubeconfig
// or kuberc is a configuration error (exit 2).
func (o *kubeconfigOptions) restConfig(g *globals) (*rest.Config, error) {
	rc, err := o.kuberc.load(g.log.Warn)
	if err != nil {
		return nil, err
	}
	cfg, err := o.clientConfig().ClientConfig()
	if err != nil {
		return nil, invalidConfig(fmt.Errorf("loading kubeconfig: %w", err))
	}
	execcred.SetPolicy(cfg, rc.Policy())
	if rc.Path != "" {
		g.log.Debug("kuberc", "file", rc.Path, "credentialPluginPolicy", rc.Policy().String())
	}
	return cfg, nil
}

// loadingRules are kubectl's: --kubeconfig, else $KUBECONFIG merged, else ~/.kube/config.
func (o *kubeconfigOptions) loadingRules() *clientcmd.ClientConfigLoadingRules {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.path
	return rules
}

func (o *kubeconfigOptions) clientConfig() clientcmd.ClientConfig {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loadingRules(), &clientcmd.ConfigOverrides{CurrentContext: o.context})
}

// httpSignature returns the httpSignature block (KEP-6308) of the context's user, which
// clientcmd drops, read from the same files in the same order; nil when it has none. Call
// it after restConfig, which reports a kubeconfig that does not load.
func (o *kubeconfigOptions) httpSignature() (*execcred.HTTPSignature, error) {
	raw, err := o.clientConfig().RawConfig()
	if err != nil {
		return nil, invalidConfig(fmt.Errorf("loading kubeconfig: %w", err))
	}
	name := o.context
	if name == "" {
		name = raw.CurrentContext
	}
	kctx := raw.Contexts[name]
	if kctx == nil || kctx.AuthInfo == "" {
		return nil, nil
	}
	h, err := execcred.LoadHTTPSignature(o.loadingRules().GetLoadingPrecedence(), kctx.AuthInfo)
	if err != nil {
		return nil, invalidConfig(err)
	}
	return h, nil
}

// signingSource is the source of the signing material of a user with an httpSignature
// block (execcred.NewHTTPSignatureSource), with kplug's pipeline options and keyFile URIs
// opened as proxy-plugin --sign-key opens them (pkcs11:). It fetches the first material
// now, so that a bad key or plugin fails here, not in the middle of a request. Call
// done when finished with it.
func (o *kubeconfigOptions) signingSource(ctx context.Context, g *globals, cfg *rest.Config, h *execcred.HTTPSignature, stdinUse string) (src execcred.Source, done func(), err error) {
	var closers []io.Closer
	done = func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}
	opts := o.credentialOptions(g, stdinUse)
	opts.OpenKey = func(uri string) (crypto.Signer, error) {
		key, closer, err := keys.OpenSigner(uri, keyOptions())
		if err == nil {
			closers = append(closers, closer)
		}
		return key, err
	}
	if src, err = execcred.NewHTTPSignatureSource(cfg, h, opts); err == nil {
		_, err = src.Credential(ctx, nil)
	}
	if err != nil {
		done()
		return nil, nil, pluginFailed(err)
	}
	g.log.Debug("httpSignature: signing each request in process", "keyFiles", h.HasKeyFiles())
	return src, done, nil
}

// connect runs the context's exec plugin, if a client would run one, as a client that
// supports exec proxies (execproxy.Connect), with everything beyond client-go turned on.
// stdinUse, if set, says why the plugin may not read stdin. Close the session when done.
func (o *kubeconfigOptions) connect(ctx context.Context, g *globals, cfg *rest.Config, stdinUse string) (*execproxy.Session, error) {
	s, err := execproxy.Connect(ctx, cfg, execproxy.Options{Credentials: o.credentialOptions(g, stdinUse)})
	if err != nil {
		return nil, pluginFailed(err)
	}
	return s, nil
}

// credentialOptions is the exec credential pipeline kplug's client commands use: the
// plugin's stderr shown, the --plugin-timeout, backoff 1s doubling to 1m, refresh ahead.
func (o *kubeconfigOptions) credentialOptions(g *globals, stdinUse string) execcred.Options {
	return execcred.Options{
		Plugin: execcred.PluginOptions{
			Runner:                  pluginRunner(g),
			Timeout:                 o.timeout,
			Stdin:                   stdinFile(g),
			StdinUnavailable:        stdinUse != "",
			StdinUnavailableMessage: stdinUse,
		},
		Backoff:    time.Second,
		MaxBackoff: time.Minute,
		Logger:     g.log,
	}
}

// pluginRunner passes a plugin's stderr to kplug's, where the user sees it as it is
// written (prompts, warnings); errors then do not repeat it.
func pluginRunner(g *globals) *execplugin.Runner {
	return &execplugin.Runner{Stderr: g.io.Err, StderrShown: true}
}

// pluginFailed makes an invalid exec block, and a plugin's usage error (exit code 2: the
// kubeconfig's exec arguments or environment are wrong), kplug's invalid-configuration
// error, which exits 2 too.
func pluginFailed(err error) error {
	var exit *execplugin.ExitError
	var invalid *execcred.ConfigError
	if errors.As(err, &invalid) || errors.As(err, &exit) && exit.Code == ExitUsage {
		return invalidConfig(err)
	}
	return err
}
