package execcred

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/term"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execplugin"
)

// PluginOptions say how a Plugin runs its plugin, as the program hosting it would: with
// which runner, on which terminal, what it knows about stdin, and how long a run may take.
// The zero value runs plugins with the process environment, stderr to
// os.Stderr and os.Stdin as the terminal, with no timeout, as client-go does.
type PluginOptions struct {
	// Runner runs the plugin; nil means a zero execplugin.Runner (host environment, stderr
	// to os.Stderr). Its Observe hook is where Metrics.ObserveCall counts runs.
	Runner *execplugin.Runner
	// Stdin is the terminal an interactive plugin gets; nil means os.Stdin.
	Stdin *os.File
	// IsTerminal reports whether f is a terminal; nil means golang.org/x/term.IsTerminal.
	IsTerminal func(f *os.File) bool
	// StdinUnavailable says the host itself reads stdin (kubectl apply -f -), so a plugin
	// must not; StdinUnavailableMessage says why.
	StdinUnavailable        bool
	StdinUnavailableMessage string
	// Timeout bounds non-interactive runs; the plugin's process group is killed when it
	// passes. Zero means no timeout, as in client-go.
	Timeout time.Duration
	// ObservePolicy, if set, is told the outcome of each credential plugin policy check
	// (Config.Policy), one per attempted run; Metrics.ObservePolicy counts them.
	ObservePolicy func(allowed bool)
}

// Plugin is the exec-backed Source: each call runs the configured plugin once, through
// execplugin, exactly as client-go runs it, and decodes its answer. It keeps nothing
// between calls: wrap it in WithCache (New composes the standard pipeline). It is safe for
// concurrent use.
type Plugin struct {
	cfg  Config
	host PluginOptions
}

// NewPlugin validates cfg (its policy included) and returns a Plugin.
func NewPlugin(cfg Config, o PluginOptions) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Plugin{cfg: cfg, host: o}, nil
}

// Credential runs the plugin once and decodes its answer. A v1alpha1 plugin is sent
// rejected.Response as spec.response; later versions are not told why they run. ctx ends
// the run (the plugin's process group is killed). The plugin runs only if Config.Policy
// allows it, checked each time, after the interactive mode as in client-go; a denial
// unwraps to a *kuberc.DeniedError. Every error is a *PluginError.
func (p *Plugin) Credential(ctx context.Context, rejected *Rejection) (*Credential, error) {
	var response *Response
	if rejected != nil {
		response = rejected.Response
	}
	cred, err := p.run(ctx, response)
	if err != nil {
		return nil, p.wrap(err)
	}
	return cred, nil
}

func (p *Plugin) run(ctx context.Context, rejected *Response) (*Credential, error) {
	interactive, err := p.interactive()
	if err != nil {
		return nil, fmt.Errorf("plugin %q: exec plugin cannot support interactive mode: %w", p.cfg.Command, err)
	}
	cluster := p.cfg.Cluster
	if p.cfg.APIVersion == V1alpha1 {
		cluster = nil
	} else {
		rejected = nil
	}
	// lockFilePath (v1beta1 and v1) says the client supports exec proxies; see
	// docs/exec-proxy.md.
	info, err := (&wire.Info{APIVersion: p.cfg.APIVersion, Interactive: interactive, Cluster: cluster, Response: rejected,
		LockFilePath: p.cfg.LockFilePath, HTTPSignature: p.cfg.HTTPSignature}).Encode()
	if err != nil {
		return nil, fmt.Errorf("plugin %q: encoding %s: %w", p.cfg.Command, InfoEnv, err)
	}
	path, err := p.allowed()
	if err != nil {
		return nil, err // client-go's words; the plugin did not run
	}
	cmd := execplugin.Command{
		Path:        path,
		Args:        p.cfg.Args,
		BaseDir:     p.cfg.BaseDir,
		Env:         p.cfg.Env,
		Reserved:    []string{InfoEnv + "=" + string(info)},
		InstallHint: p.cfg.InstallHint,
		// A client that supports exec proxies lets a plugin that is its own proxy keep
		// running once it has answered.
		AnswerAtEOF: p.cfg.LockFilePath != "",
	}
	if interactive {
		cmd.Stdin = execplugin.TerminalStdin(p.stdin())
	} else {
		// A login prompt has no deadline; a non-interactive plugin does.
		cmd.Timeout = p.host.Timeout
	}
	runner := p.host.Runner
	if runner == nil {
		runner = &execplugin.Runner{}
	}
	res, err := runner.Run(ctx, cmd)
	if err != nil {
		return nil, explained(err) // execplugin errors name the plugin
	}
	var kd *wire.KeyDerivation
	if p.cfg.HTTPSignature != nil {
		kd = p.cfg.HTTPSignature.KeyDerivation
	}
	var cred *Credential
	s, err := wire.Parse(p.cfg.APIVersion, res.Stdout)
	if err == nil {
		cred, err = fromStatus(s, kd)
	}
	if err == nil {
		err = checkSigning(p.cfg.HTTPSignature, cred)
	}
	if err != nil {
		return nil, fmt.Errorf("plugin %q: %w", p.cfg.Command, err)
	}
	return cred, nil
}

// checkSigning checks that a plugin asked for signing material returned it, with a value
// for every header asked for.
func checkSigning(asked *wire.HTTPSignatureRequest, cred *Credential) error {
	if asked == nil {
		return nil
	}
	if cred.HTTPSignature == nil {
		return errors.New("the kubeconfig user has httpSignature, so the plugin must return signing material in status.httpSignature (KEP-6308), not a token or client certificate")
	}
	for _, h := range asked.SignedHeaders {
		if headerValue(cred.HTTPSignature.Headers, h.Name) == "" {
			return fmt.Errorf("the plugin returned no value for the signed header %s, which the kubeconfig's httpSignature.signedHeaders names: it must return it in status.httpSignature.signedHeaders", h.Name)
		}
	}
	return nil
}

// interactive applies client-go's table: the terminal check comes before StdinUnavailable.
func (p *Plugin) interactive() (bool, error) {
	isTerminal := p.host.IsTerminal
	if isTerminal == nil {
		isTerminal = func(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
	}
	tty := isTerminal(p.stdin())
	switch p.cfg.InteractiveMode {
	case Never:
		return false, nil
	case IfAvailable:
		return tty && !p.host.StdinUnavailable, nil
	case Always:
		if !tty {
			return false, errors.New("standard input is not a terminal")
		}
		if p.host.StdinUnavailable {
			msg := "standard input is unavailable"
			if p.host.StdinUnavailableMessage != "" {
				msg += ": " + p.host.StdinUnavailableMessage
			}
			return false, errors.New(msg)
		}
		return true, nil
	}
	return false, fmt.Errorf("unknown interactiveMode: %q", p.cfg.InteractiveMode)
}

func (p *Plugin) stdin() *os.File {
	if p.host.Stdin != nil {
		return p.host.Stdin
	}
	return os.Stdin
}

// wrap adds the install hint to a not-found error and makes every error a PluginError.
func (p *Plugin) wrap(err error) error {
	pe := &PluginError{Command: p.cfg.Command, Err: err}
	var nf *execplugin.NotFoundError
	if errors.As(err, &nf) {
		pe.Hint = p.cfg.InstallHint
	}
	return pe
}

// PluginError is every error Plugin.Credential returns. Unwrap reaches the execplugin
// error (*execplugin.ExitError, *execplugin.NotFoundError, *execplugin.TimeoutError and
// the others), a *StatusError before the *execplugin.ExitError when the plugin said why it
// failed, or the decoding error.
type PluginError struct {
	Command string
	Err     error  // names the plugin already
	Hint    string // the install hint, for a plugin that was not found
}

func (e *PluginError) Error() string {
	msg := "execcred: " + e.Err.Error()
	if e.Hint != "" {
		msg += "\n\n" + e.Hint
	}
	return msg
}

func (e *PluginError) Unwrap() error { return e.Err }
