package kuberc

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// PolicyType is kuberc's credentialPluginPolicy.
type PolicyType string

// The policies client-go knows. The empty PolicyType is AllowAll.
const (
	AllowAll  PolicyType = "AllowAll"
	DenyAll   PolicyType = "DenyAll"
	Allowlist PolicyType = "Allowlist"
)

// AllowlistEntry is one entry of credentialPluginAllowlist.
type AllowlistEntry struct {
	// Command is a bare name (looked up in PATH) or a path. It matches a plugin whose
	// command is the same string, or when both resolve (exec.LookPath) to the same path.
	Command string
}

// Policy is the credential plugin policy of client-go 1.35 and later: which exec
// credential plugins a client may run. The zero value allows every plugin, as client-go
// does without kuberc. A Policy is a value; its methods are safe for concurrent use.
type Policy struct {
	Type PolicyType
	// Allowlist is only for Type Allowlist. nil and empty differ, as in client-go: an
	// Allowlist policy must have a non-empty list, and the others must have none at all.
	Allowlist []AllowlistEntry
}

// InvalidPolicyError is a Policy that Validate refuses. Its message is client-go's.
type InvalidPolicyError struct{ Err error }

func (e *InvalidPolicyError) Error() string { return "invalid plugin policy: " + e.Err.Error() }
func (e *InvalidPolicyError) Unwrap() error { return e.Err }

// Validate checks the policy as client-go does when it builds an exec authenticator (and
// kubectl when it reads kuberc). Its error is an *InvalidPolicyError.
func (p Policy) Validate() error {
	if err := p.validate(); err != nil {
		return &InvalidPolicyError{Err: err}
	}
	return nil
}

func (p Policy) validate() error {
	switch p.Type {
	case "", AllowAll, DenyAll:
		if p.Allowlist != nil {
			return fmt.Errorf("misconfigured credential plugin allowlist: plugin policy is %q but allowlist is non-nil", p.Type)
		}
		return nil
	case Allowlist:
	default:
		return fmt.Errorf("unknown plugin policy: %q", p.Type)
	}
	switch {
	case p.Allowlist == nil:
		// A misspelt credentialPluginAllowlist: a security setting fails closed.
		return fmt.Errorf("credential plugin policy set to %q, but allowlist is unspecified", Allowlist)
	case len(p.Allowlist) == 0:
		return fmt.Errorf("credential plugin policy set to %q, but allowlist is empty; use %q policy instead", Allowlist, DenyAll)
	}
	for i, e := range p.Allowlist {
		if e.Command == "" {
			return fmt.Errorf("misconfigured credential plugin allowlist: empty allowlist entry #%d", i+1)
		}
		if clean := filepath.Clean(e.Command); clean != e.Command {
			return fmt.Errorf("non-normalized file path: %q vs %q", e.Command, clean)
		}
	}
	return nil
}

// DeniedError says the policy does not let a plugin run. Its message is client-go's;
// Unwrap gives exec.LookPath's error when the command could not be resolved.
type DeniedError struct {
	// Command is the plugin's command, cleaned (filepath.Clean) as client-go cleans it.
	Command string
	Policy  PolicyType
	Err     error
}

func (e *DeniedError) Error() string { return e.Err.Error() }
func (e *DeniedError) Unwrap() error { return e.Err }

// Check decides whether a plugin configured with command may run, as client-go decides
// before each run, and returns what to run: the command itself, or, when the allowlist
// had to resolve it, the path it resolved to (so that what runs is what was checked).
// The policy must be valid. A denial is a *DeniedError.
//
// Under Allowlist the plugin may run when its command (cleaned) or the executable it
// resolves to in PATH equals an entry verbatim; otherwise when the path exec.LookPath
// gives for the command equals the path it gives for an entry with the same base name.
// Paths are compared as strings, as LookPath returns them: symbolic links are not
// followed, and a relative command is compared as it is. A command that cannot be
// resolved is denied.
func (p Policy) Check(command string) (string, error) {
	cmd := filepath.Clean(command)
	switch p.Type {
	case "", AllowAll:
		return command, nil
	case DenyAll:
		return "", p.denied(cmd, fmt.Errorf("plugin %q not allowed: policy set to %q", cmd, DenyAll))
	case Allowlist:
		return p.checkAllowlist(command, cmd)
	}
	return "", p.denied(cmd, fmt.Errorf("unknown plugin policy %q", p.Type))
}

func (p Policy) checkAllowlist(command, cmd string) (string, error) {
	// What exec.Command makes of the command (a bare name looked up in PATH, with
	// exec.ErrDot semantics and, on Windows, PATHEXT) is what client-go runs and checks.
	// The command is never started.
	c := exec.CommandContext(context.Background(), cmd) // never started: only its path resolution is used
	if p.listed(cmd) || p.listed(c.Path) {
		if c.Err != nil {
			return command, nil // the run itself reports the command missing
		}
		return c.Path, nil
	}
	path, err := c.Path, c.Err
	if path == cmd {
		if path, err = exec.LookPath(cmd); path == "" {
			path = cmd
		}
	}
	if err != nil {
		return "", p.denied(cmd, fmt.Errorf("plugin path %q cannot be resolved for credential plugin allowlist check: %w", path, err))
	}
	if p.listed(path) || p.resolvesTo(path) {
		return path, nil
	}
	return "", p.denied(cmd, fmt.Errorf("plugin path %q is not permitted by the credential plugin allowlist", path))
}

// listed reports a verbatim match.
func (p Policy) listed(s string) bool {
	for _, e := range p.Allowlist {
		if e.Command == s {
			return true
		}
	}
	return false
}

// resolvesTo reports whether an entry with path's base name resolves to path. Entries
// are resolved on every check: a PATH or a file system that changed is seen.
func (p Policy) resolvesTo(path string) bool {
	base := filepath.Base(path)
	for _, e := range p.Allowlist {
		if filepath.Base(e.Command) != base {
			continue
		}
		if resolved, err := exec.LookPath(e.Command); err == nil && resolved == path {
			return true
		}
	}
	return false
}

func (p Policy) denied(cmd string, err error) error {
	return &DeniedError{Command: cmd, Policy: p.Type, Err: err}
}

// String describes the policy for messages: "DenyAll", "Allowlist [kplug /usr/bin/x]".
func (p Policy) String() string {
	t := p.Type
	if t == "" {
		t = AllowAll
	}
	if p.Allowlist == nil {
		return string(t)
	}
	cmds := make([]string, len(p.Allowlist))
	for i, e := range p.Allowlist {
		cmds[i] = e.Command
	}
	return fmt.Sprintf("%s [%s]", t, strings.Join(cmds, " "))
}
