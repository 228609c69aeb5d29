package execcred

import (
	"path/filepath"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred/kuberc"
)

// SetPolicy gives cfg's exec provider the credential plugin policy, as kubectl does with
// the policy of its kuberc: client-go's exec authenticator and FromRESTConfig then both
// enforce it. A cfg without an exec provider is left alone.
func SetPolicy(cfg *rest.Config, p kuberc.Policy) {
	if cfg.ExecProvider == nil {
		return
	}
	cp := clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PolicyType(p.Type)}
	if p.Allowlist != nil {
		cp.Allowlist = make([]clientcmdapi.AllowlistEntry, len(p.Allowlist))
		for i, e := range p.Allowlist {
			cp.Allowlist[i].Command = e.Command
		}
	}
	cfg.ExecProvider.PluginPolicy = cp
}

// policyOf converts client-go's policy, keeping a nil allowlist nil (validation tells
// nil from empty).
func policyOf(cp clientcmdapi.PluginPolicy) kuberc.Policy {
	p := kuberc.Policy{Type: kuberc.PolicyType(cp.PolicyType)}
	if cp.Allowlist != nil {
		p.Allowlist = make([]kuberc.AllowlistEntry, len(cp.Allowlist))
		for i, e := range cp.Allowlist {
			p.Allowlist[i].Command = e.Command
		}
	}
	return p
}

// allowed applies the policy before a run, as client-go does, and returns the command
// to run: the configured one, or the path the allowlist resolved it to, so that what runs
// is what was checked. A relative command with a directory in it is anchored at BaseDir
// first (client-go has no BaseDir; clientcmd makes such commands absolute). A denial is
// a *kuberc.DeniedError with client-go's message.
func (p *Plugin) allowed() (string, error) {
	command := p.cfg.Command
	if p.cfg.BaseDir != "" && filepath.Base(command) != command && !filepath.IsAbs(command) {
		command = filepath.Join(p.cfg.BaseDir, command)
	}
	path, err := p.cfg.Policy.Check(command)
	if p.host.ObservePolicy != nil {
		p.host.ObservePolicy(err == nil)
	}
	if err != nil {
		return "", err
	}
	if path == command {
		return p.cfg.Command, nil // nothing resolved: run it as configured
	}
	return path, nil
}
