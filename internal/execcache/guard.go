package execcache

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/kplug/kplug/execcred/kuberc"
	"github.com/kplug/kplug/execcred/wire"
)

// Guard is the credential plugin policy of the client that runs a kplug command as its
// exec plugin, for code that the command would load or run on the exec block's word
// besides itself: kubectl checked the exec block's command (kplug), and nothing checks
// the rest unless kplug does. kplug proxy-plugin loads a PKCS#11 module and runs an AWS
// credential_process; exec-cache runs the wrapped plugin.
type Guard struct {
	p        Process
	policies []FilePolicy
}

// NewGuard reads the policies that apply to p, as exec-cache reads them for its wrapped
// plugin (the client's kuberc, this environment's, the account's). A process that no client
// ran (no KUBERNETES_EXEC_INFO) is guarded by nothing: whoever runs it chose its arguments.
func NewGuard(p Process) (*Guard, error) {
	if lookupEnv(p.Environ, wire.InfoEnv) == "" {
		return &Guard{p: p}, nil
	}
	if err := p.Caller.chainError(); err != nil {
		return nil, err
	}
	policies, err := (&Command{}).loadKuberc(p)
	if err != nil {
		return nil, err
	}
	return &Guard{p: p, policies: policies}, nil
}

// Restricts reports whether a policy limits which plugins run (anything but AllowAll).
func (g *Guard) Restricts() bool {
	for _, fp := range g.policies {
		if fp.Policy.Type != kuberc.AllowAll {
			return true
		}
	}
	return false
}

// Check checks file, described by what ("the PKCS#11 module"), against every policy, as
// the client checks an exec block's command: a relative path is taken from the working
// directory, a name from the client's PATH. It returns the file that passed (the one to
// use), or a *PolicyError.
func (g *Guard) Check(what, file string) (string, error) {
	o := Options{Caller: g.p.Caller, Environ: g.p.Environ, Policies: g.policies}
	path, err := o.approve(file)
	var pe *PolicyError
	if errors.As(err, &pe) {
		pe.What = what
	}
	return path, err
}

// ClientEnv is the value of name in the client's environment, which the exec block
// cannot set, and whether that environment is known.
func (g *Guard) ClientEnv(name string) (string, bool) {
	if !g.p.Caller.Known() {
		return "", false
	}
	return lookupEnv(g.p.Caller.Environ, name), true
}

// AccountHome is the account's home directory from the user database ("" if unknown).
func (g *Guard) AccountHome() string { return g.p.AccountHome }

// approve anchors a relative path at the working directory and checks the file against
// every policy; the file an allowlist approved is returned, "" when none restricted it.
func (o *Options) approve(command string) (string, error) {
	if filepath.Base(command) != command && !filepath.IsAbs(command) {
		abs, err := filepath.Abs(command)
		if err != nil {
			return "", fmt.Errorf("exec-cache: %w", err)
		}
		command = abs // as clientcmd anchors an exec block's relative command
	}
	lookPath := o.clientLookPath()
	approved := ""
	for _, p := range o.Policies {
		resolved, err := p.Policy.CheckWith(command, lookPath)
		if err != nil {
			return "", &PolicyError{Policy: p.Policy, File: p.File, Err: err}
		}
		if p.Policy.Type == kuberc.Allowlist {
			approved = resolved // the file this allowlist resolved and approved
		}
	}
	return approved, nil
}
