package kuberc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// entries is an allowlist of commands, non-nil even when empty.
func entries(cmds ...string) []AllowlistEntry {
	l := []AllowlistEntry{}
	for _, c := range cmds {
		l = append(l, AllowlistEntry{Command: c})
	}
	return l
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy Policy
		want   string // client-go's message after "invalid plugin policy: "; empty: valid
		hint   string // kplug's, after client-go's and "; "
	}{
		{"zero", Policy{}, "", ""},
		{"AllowAll", Policy{Type: AllowAll}, "", ""},
		{"DenyAll", Policy{Type: DenyAll}, "", ""},
		{"Allowlist", Policy{Type: Allowlist, Allowlist: entries("kplug", "/usr/local/bin/x", "bin/y")}, "", ""},
		{"zero with a list", Policy{Allowlist: entries("kplug")}, `misconfigured credential plugin allowlist: plugin policy is "" but allowlist is non-nil`,
			`credentialPluginAllowlist ["kplug"] applies only with credentialPluginPolicy: Allowlist: set that policy to use the list, or delete the list`},
		// Regression test for kubernetes/kubernetes#142564: kubectl kuberc set before 1.38
		// left the list beside AllowAll or DenyAll; the message names it and the way out.
		{"AllowAll with an empty list", Policy{Type: AllowAll, Allowlist: entries()}, `misconfigured credential plugin allowlist: plugin policy is "AllowAll" but allowlist is non-nil`,
			`credentialPluginAllowlist [] is left over beside credentialPluginPolicy: AllowAll (kubectl kuberc set before 1.38 keeps the list when it changes the policy): delete the list, or set credentialPluginPolicy: Allowlist to use it`},
		{"DenyAll with a list", Policy{Type: DenyAll, Allowlist: entries("kplug", "/usr/bin/x")}, `misconfigured credential plugin allowlist: plugin policy is "DenyAll" but allowlist is non-nil`,
			`credentialPluginAllowlist ["kplug" "/usr/bin/x"] is left over beside credentialPluginPolicy: DenyAll (kubectl kuberc set before 1.38 keeps the list when it changes the policy): delete the list, or set credentialPluginPolicy: Allowlist to use it`},
		{"DenyAll with odd entries", Policy{Type: DenyAll, Allowlist: entries("", "a\nb")}, `misconfigured credential plugin allowlist: plugin policy is "DenyAll" but allowlist is non-nil`,
			`credentialPluginAllowlist ["" "a\nb"] is left over beside credentialPluginPolicy: DenyAll (kubectl kuberc set before 1.38 keeps the list when it changes the policy): delete the list, or set credentialPluginPolicy: Allowlist to use it`},
		{"Allowlist without a list", Policy{Type: Allowlist}, `credential plugin policy set to "Allowlist", but allowlist is unspecified`, ""},
		{"Allowlist with an empty list", Policy{Type: Allowlist, Allowlist: entries()}, `credential plugin policy set to "Allowlist", but allowlist is empty; use "DenyAll" policy instead`, ""},
		{"empty entry", Policy{Type: Allowlist, Allowlist: entries("kplug", "")}, `misconfigured credential plugin allowlist: empty allowlist entry #2`, ""},
		{"dot slash", Policy{Type: Allowlist, Allowlist: entries("./kplug")}, `non-normalized file path: "./kplug" vs "kplug"`, ""},
		{"double slash", Policy{Type: Allowlist, Allowlist: entries("/usr//bin/kplug")}, `non-normalized file path: "/usr//bin/kplug" vs "/usr/bin/kplug"`, ""},
		{"trailing slash", Policy{Type: Allowlist, Allowlist: entries("/usr/bin/")}, `non-normalized file path: "/usr/bin/" vs "/usr/bin"`, ""},
		{"unknown", Policy{Type: "denyall"}, `unknown plugin policy: "denyall"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			want := "invalid plugin policy: " + tt.want
			if tt.hint != "" {
				want += "; " + tt.hint
			}
			var invalid *InvalidPolicyError
			if !errors.As(err, &invalid) || err.Error() != want || invalid.Err.Error() != tt.want || invalid.Hint != tt.hint {
				t.Fatalf("Validate: %v\nwant %s", err, want)
			}
		})
	}
}

// pathFixture makes a directory with an executable "plug", another "plug" elsewhere, a
// symbolic link to the first, and PATH set to the first's directory.
func pathFixture(t *testing.T) (bin, other, link string) {
	if runtime.GOOS == "windows" {
		t.Skip("executables and links are made the Unix way")
	}
	dir := t.TempDir()
	bin, other, link = filepath.Join(dir, "bin"), filepath.Join(dir, "other"), filepath.Join(dir, "link")
	for _, d := range []string{bin, other, link} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(bin, "plug"), filepath.Join(other, "plug")} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(bin, "plug"), filepath.Join(link, "plug")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	return bin, other, link
}

func TestCheck(t *testing.T) {
	bin, other, link := pathFixture(t)
	plug := filepath.Join(bin, "plug")
	list := func(cmds ...string) Policy {
		p := Policy{Type: Allowlist, Allowlist: []AllowlistEntry{}}
		for _, c := range cmds {
			p.Allowlist = append(p.Allowlist, AllowlistEntry{Command: c})
		}
		return p
	}
	tests := []struct {
		name     string
		policy   Policy
		command  string
		wantPath string // what to run when allowed
		wantErr  string // client-go's message when denied
	}{
		{"zero policy runs the command as configured", Policy{}, "./plug", "./plug", ""},
		{"AllowAll", Policy{Type: AllowAll}, "plug", "plug", ""},
		{"DenyAll", Policy{Type: DenyAll}, plug, "", `plugin "` + plug + `" not allowed: policy set to "DenyAll"`},
		{"DenyAll names the cleaned command", Policy{Type: DenyAll}, "./plug", "", `plugin "plug" not allowed: policy set to "DenyAll"`},
		{"name listed: the PATH entry runs", list("plug"), "plug", plug, ""},
		{"name, its path listed", list(plug), "plug", plug, ""},
		{"path, its name listed (resolved in PATH)", list("kubelogin", "plug"), plug, plug, ""},
		{"absolute path listed", list(plug), plug, plug, ""},
		{"unclean command", list(plug), bin + "//plug", plug, ""},
		{"same name in another directory", list("plug"), filepath.Join(other, "plug"), "", `plugin path "` + filepath.Join(other, "plug") + `" is not permitted by the credential plugin allowlist`},
		{"a link to a listed path is another path", list(plug), filepath.Join(link, "plug"), "", `plugin path "` + filepath.Join(link, "plug") + `" is not permitted by the credential plugin allowlist`},
		{"the target of a listed link is another path", list(filepath.Join(link, "plug")), plug, "", `plugin path "` + plug + `" is not permitted by the credential plugin allowlist`},
		{"entries of another name are not resolved", list("kubelogin"), plug, "", `plugin path "` + plug + `" is not permitted by the credential plugin allowlist`},
		{"not in PATH", list("plug"), "nosuch", "", `plugin path "nosuch" cannot be resolved for credential plugin allowlist check: exec: "nosuch": executable file not found in $PATH`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, err := tt.policy.Check(tt.command)
			if tt.wantErr == "" {
				if err != nil || path != tt.wantPath {
					t.Fatalf("Check(%q) = %q, %v; want %q", tt.command, path, err, tt.wantPath)
				}
				return
			}
			var denied *DeniedError
			if !errors.As(err, &denied) || err.Error() != tt.wantErr || path != "" {
				t.Fatalf("Check(%q) = %q, %v\nwant the error %s", tt.command, path, err, tt.wantErr)
			}
			if denied.Policy != tt.policy.Type || denied.Command != filepath.Clean(tt.command) {
				t.Errorf("DeniedError = %+v", denied)
			}
		})
	}
}

// A command found through a relative PATH entry is not resolved (exec.ErrDot), so it is
// denied: the working directory never chooses what an allowlist lets run. A verbatim entry
// does not change that: what runs must be a file the check resolved.
func TestCheckRelativePATHEntry(t *testing.T) {
	bin, _, _ := pathFixture(t)
	t.Chdir(filepath.Dir(bin))
	t.Setenv("PATH", "bin")
	want := `plugin path "bin/plug" cannot be resolved for credential plugin allowlist check: exec: "plug": cannot run executable found relative to current directory`
	for _, entry := range []string{filepath.Join(bin, "plug"), "plug"} {
		path, err := Policy{Type: Allowlist, Allowlist: []AllowlistEntry{{Command: entry}}}.Check("plug")
		if !errors.Is(err, exec.ErrDot) || err.Error() != want || path != "" {
			t.Fatalf("entry %s: Check = %q, %v\nwant %s", entry, path, err, want)
		}
	}
}

// TestSecurityListedNameNeverRunsUnresolved (issue 27, N1a): ./plug and bin/../plug clean
// to the listed name plug; when PATH has no plug, Check used to hand back the command as
// written, and exec-cache then ran ./plug from the working directory, a file the allowlist
// never approved. Now the check denies what it cannot resolve, and otherwise returns the
// file PATH gives, which is the file it approved.
func TestSecurityListedNameNeverRunsUnresolved(t *testing.T) {
	bin, other, _ := pathFixture(t)
	t.Chdir(other) // holds a planted plug
	listed := Policy{Type: Allowlist, Allowlist: []AllowlistEntry{{Command: "plug"}}}
	for _, command := range []string{"./plug", "bin/../plug"} {
		t.Setenv("PATH", filepath.Join(filepath.Dir(bin), "empty"))
		path, err := listed.Check(command)
		want := `plugin path "plug" cannot be resolved for credential plugin allowlist check: exec: "plug": executable file not found in $PATH`
		if err == nil || err.Error() != want || path != "" {
			t.Errorf("Check(%q) without plug in PATH = %q, %v\nwant %s", command, path, err, want)
		}
		t.Setenv("PATH", bin)
		if path, err := listed.Check(command); err != nil || path != filepath.Join(bin, "plug") {
			t.Errorf("Check(%q) = %q, %v; want the plug PATH gives, %s", command, path, err, filepath.Join(bin, "plug"))
		}
	}
}

// TestCheckWith: names, the command's and the entries', are resolved by the lookPath
// given, never in the process's PATH.
func TestCheckWith(t *testing.T) {
	bin, other, _ := pathFixture(t)
	t.Setenv("PATH", other) // the process's PATH finds the other plug
	clientPATH := func(file string) (string, error) {
		if filepath.Base(file) != file {
			return exec.LookPath(file)
		}
		return filepath.Join(bin, file), nil
	}
	listed := Policy{Type: Allowlist, Allowlist: []AllowlistEntry{{Command: "plug"}}}
	if path, err := listed.CheckWith("plug", clientPATH); err != nil || path != filepath.Join(bin, "plug") {
		t.Errorf("CheckWith(plug) = %q, %v; want %s", path, err, filepath.Join(bin, "plug"))
	}
	want := `plugin path "` + filepath.Join(other, "plug") + `" is not permitted by the credential plugin allowlist`
	if path, err := listed.CheckWith(filepath.Join(other, "plug"), clientPATH); err == nil || err.Error() != want || path != "" {
		t.Errorf("CheckWith(other plug) = %q, %v\nwant %s", path, err, want)
	}
	if path, err := listed.Check(filepath.Join(other, "plug")); err != nil || path != filepath.Join(other, "plug") {
		t.Errorf("Check (the process's PATH) = %q, %v; want the other plug allowed", path, err)
	}
}

func TestPolicyString(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p    Policy
		want string
	}{
		{Policy{}, "AllowAll"},
		{Policy{Type: DenyAll}, "DenyAll"},
		{Policy{Type: Allowlist}, "Allowlist"},
		{Policy{Type: Allowlist, Allowlist: []AllowlistEntry{{Command: "kplug"}, {Command: "/usr/bin/x"}}}, "Allowlist [kplug /usr/bin/x]"},
	} {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}
