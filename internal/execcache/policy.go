package execcache

import (
	"fmt"

	"github.com/kplug/kplug/execcred/kuberc"
)

// FilePolicy is a credential plugin policy and the kuberc file it came from.
type FilePolicy struct {
	Policy kuberc.Policy
	File   string
}

// PolicyError says the credential plugin policy does not allow the wrapped command:
// nothing ran and nothing was served. Err is a *kuberc.DeniedError with client-go's
// message.
type PolicyError struct {
	Policy kuberc.Policy
	File   string // the kuberc file; empty if the policy came from elsewhere
	// What was refused; empty means the wrapped plugin.
	What string
	Err  error
}

func (e *PolicyError) Error() string {
	from := ""
	if e.File != "" {
		from = " in " + e.File
	}
	if e.What != "" {
		return fmt.Sprintf("the credential plugin policy%s (%s) does not allow %s: %v; list its absolute path in credentialPluginAllowlist to allow it", from, e.Policy, e.What, e.Err)
	}
	return fmt.Sprintf("exec-cache: the credential plugin policy%s (%s) does not allow the wrapped plugin: %v", from, e.Policy, e.Err)
}

func (e *PolicyError) Unwrap() error { return e.Err }
