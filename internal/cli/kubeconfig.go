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

// user is a kubeconfig context loaded as kubectl loads it, and the credential pipeline
// options for its user. Close it when done: it holds the keys a pkcs11: keyFile opened.
type user struct {
	cfg     *rest.Config
	opts    execcred.Options
	closers []io.Closer
}

// Close releases the keys the user's httpSignature block opened.
func (u *user) Close() {
	for _, c := range u.closers {
		_ = c.Close()
	}
}

// load is the CLI's one kubeconfig loader. It loads the context as kubectl would
// (KUBECONFIG merging, relative paths against each file's directory), puts kuberc's
// credential plugin policy on the exec provider, where kplug's runtime and client-go's
// both enforce it, and reads the user's httpSignature block, which clientcmd drops, from
// the same files. The options are kplug's pipeline (credentialOptions), with keyFile URIs
// opened as proxy-plugin --sign-key opens them (pkcs11:). An unusable kubeconfig or
// kuberc is a configuration error (exit 2). stdinUse, if set, says why a plugin may not
// read stdin.
func (o *kubeconfigOptions) load(g *globals, stdinUse string) (*user, error) {
	rc, err := o.kuberc.load(g.log.Warn)
	if err != nil {
		return nil, err
	}
	cc := o.files()
	cfg, err := cc.restConfig()
	if err != nil {
		return nil, invalidConfig(fmt.Errorf("loading kubeconfig: %w", err))
	}
	execcred.SetPolicy(cfg, rc.Policy())
	if rc.Path != "" {
		g.log.Debug("kuberc", "file", rc.Path, "credentialPluginPolicy", rc.Policy().String())
	}
	u := &user{cfg: cfg, opts: o.credentialOptions(g, stdinUse)}
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, invalidConfig(fmt.Errorf("loading kubeconfig: %w", err))
	}
	name := o.context
	if name == "" {
		name = raw.CurrentContext
	}
	if kctx := raw.Contexts[name]; kctx != nil && kctx.AuthInfo != "" {
		if u.opts.HTTPSignature, err = execcred.LoadHTTPSignature(cc.rules.GetLoadingPrecedence(), kctx.AuthInfo); err != nil {
			return nil, invalidConfig(err)
		}
	}
	policy := rc.Policy()
	u.opts.OpenKey = func(uri string) (crypto.Signer, error) {
		ko, err := httpSigKeyOptions(policy, uri)
		if err != nil {
			return nil, err
		}
		key, closer, err := keys.OpenSigner(uri, ko)
		if err == nil {
			u.closers = append(u.closers, closer)
		}
		return key, err
	}
	return u, nil
}

// files are the kubeconfig files of --kubeconfig and --context, as kubectl finds them.
func (o *kubeconfigOptions) files() *kubeconfigFiles {
	return newKubeconfigFiles(o.path, o.context, "")
}

// connect connects as the context's user (execproxy.Connect: one call for every kind of
// credential, the httpSignature block included), as a client that supports exec proxies,
// with everything beyond client-go turned on. Close the session, then the user, when done.
func (u *user) connect(ctx context.Context, g *globals) (*execproxy.Session, error) {
	if h := u.opts.HTTPSignature; h != nil {
		g.log.Debug("httpSignature: signing each request in process", "keyFiles", h.HasKeyFiles())
	}
	s, err := execproxy.Connect(ctx, u.cfg, execproxy.Options{Credentials: u.opts})
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
