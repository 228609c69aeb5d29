package cli

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/kplug/kplug/execcred/kuberc"
)

// kubercOptions is the --kuberc flag of the commands that run exec credential plugins:
// they read kuberc as kubectl does and apply its credential plugin policy.
type kubercOptions struct{ path string }

func (o *kubercOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.path, "kuberc", "", "kuberc file whose credential plugin policy applies (default: $KUBERC, then ~/.kube/kuberc; KUBERC=off for none)")
}

// load finds and reads kuberc as kubectl does, from the flag, KUBERC, KUBECTL_KUBERC and
// the home directory. A named file that is missing or unusable, or an invalid policy, is
// a configuration error (exit 2); what kubectl would warn about goes to warn.
func (o *kubercOptions) load(warn func(msg string, args ...any)) (*kuberc.Loaded, error) {
	l, err := kuberc.Load(kuberc.FromEnv(o.path, os.Getenv))
	if l != nil {
		for _, w := range l.Warnings {
			warn(w)
		}
	}
	if err != nil {
		return nil, invalidConfig(err)
	}
	return l, nil
}
