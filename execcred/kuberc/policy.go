package kuberc

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
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

// InvalidPolicyError is a Policy that Validate refuses. Err's message is client-go's, word
// for word; Hint, when kplug knows one, says what to do about it, after client-go's words.
type InvalidPolicyError struct {
	Err  error
	Hint string
}

func (e *InvalidPolicyError) Error() string {
	msg := "invalid plugin policy: " + e.Err.Error()
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

func (e *InvalidPolicyError) Unwrap() error { return e.Err }

// Validate checks the policy as client-go does when it builds an exec authenticator (and
// kubectl when it reads kuberc). Its error is an *InvalidPolicyError.
func (p Policy) Validate() error {
	if err := p.validate(); err != nil {
		return &InvalidPolicyError{Err: err, Hint: p.leftoverHint()}
	}
	return nil
}

// leftoverHint explains an allowlist beside a policy that is not Allowlist, which client-go
// refuses as "allowlist is non-nil" without naming the list. kubectl kuberc set wrote such
// files: from 1.36 (kubernetes/kubectl cce0d1aef, #137300) until 1.38
// (kubernetes/kubernetes#142564), `--section credentialplugin --policy AllowAll` or
// `DenyAll` set the policy and kept the allowlist an earlier `--policy Allowlist` had
// written. The file stays invalid, as in client-go: only its owner knows which of the two
// was meant.
func (p Policy) leftoverHint() string {
	if p.Allowlist == nil || p.Type == Allowlist {
		return ""
	}
	cmds := make([]string, len(p.Allowlist))
	for i, e := range p.Allowlist {
		cmds[i] = strconv.Quote(e.Command) // unchecked under this policy: keep it on one line
	}
	list := "credentialPluginAllowlist [" + strings.Join(cmds, " ") + "]"
	if p.Type == "" {
		return list + " applies only with credentialPluginPolicy: Allowlist: set that policy to use the list, or delete the list"
	}
	return fmt.Sprintf("%s is left over beside credentialPluginPolicy: %s (kubectl kuberc set before 1.38 keeps the list when it changes the policy): delete the list, or set credentialPluginPolicy: Allowlist to use it", list, p.Type)
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
// before each run, and returns what to run: the command itself when the policy allows
// every plugin, otherwise the path the check resolved and approved, so that what runs is
// what was checked. The policy must be valid. A denial is a *DeniedError.
//
// Under Allowlist the plugin may run when its command (cleaned) or the executable it
// resolves to in PATH equals an entry verbatim; otherwise when the path exec.LookPath
// gives for the command equals the path it gives for an entry with the same base name.
// Paths are compared as strings, as LookPath returns them: symbolic links are not
// followed, and a relative command is compared as it is. A command that cannot be
// resolved is denied, even when it is listed: an unresolved name is never returned, so a
// listed name can never run a file the check did not see.
func (p Policy) Check(command string) (string, error) { return p.CheckWith(command, nil) }

// CheckWith is Check with bare names, the command's and the allowlist entries', resolved
// by lookPath instead of exec.LookPath (nil means exec.LookPath). A program that runs a
// plugin for another process passes a lookPath that searches that process's PATH, so that
// neither its own environment nor the plugin's can choose what a listed name resolves to.
// lookPath must behave as exec.LookPath: a name with a path separator is returned when it
// names an executable file, and a name found through a relative PATH entry comes back with
// an error wrapping exec.ErrDot.
func (p Policy) CheckWith(command string, lookPath func(file string) (string, error)) (string, error) {
	cmd := filepath.Clean(command)
	switch p.Type {
	case "", AllowAll:
		return command, nil
	case DenyAll:
		return "", p.denied(cmd, fmt.Errorf("plugin %q not allowed: policy set to %q", cmd, DenyAll))
	case Allowlist:
		return p.checkAllowlist(cmd, resolver{lookPath})
	}
	return "", p.denied(cmd, fmt.Errorf("unknown plugin policy %q", p.Type))
}

func (p Policy) checkAllowlist(cmd string, r resolver) (string, error) {
	path, err := r.command(cmd)
	if err == nil && path == cmd {
		path, err = r.look(cmd) // a path: it must name an executable file
	}
	if err != nil {
		if path == "" {
			path = cmd
		}
		return "", p.denied(cmd, fmt.Errorf("plugin path %q cannot be resolved for credential plugin allowlist check: %w", path, err))
	}
	if p.listed(cmd) || p.listed(path) || p.resolvesTo(path, r) {
		return path, nil
	}
	return "", p.denied(cmd, fmt.Errorf("plugin path %q is not permitted by the credential plugin allowlist", path))
}

// resolver resolves commands as exec.Command does, with lookPath for bare names (nil:
// exec.LookPath).
type resolver struct{ lookPath func(string) (string, error) }

// command is what exec.Command makes of cmd: a bare name looked up (exec.ErrDot semantics
// and, on Windows, PATHEXT), a path as it is. The command is never started.
func (r resolver) command(cmd string) (string, error) {
	if r.lookPath == nil {
		c := exec.CommandContext(context.Background(), cmd) // never started: only its path resolution is used
		return c.Path, c.Err
	}
	if filepath.Base(cmd) != cmd {
		return cmd, nil
	}
	return r.lookPath(cmd)
}

func (r resolver) look(file string) (string, error) {
	if r.lookPath == nil {
		return exec.LookPath(file)
	}
	return r.lookPath(file)
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
func (p Policy) resolvesTo(path string, r resolver) bool {
	base := filepath.Base(path)
	for _, e := range p.Allowlist {
		if filepath.Base(e.Command) != base {
			continue
		}
		if resolved, err := r.look(e.Command); err == nil && resolved == path {
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
