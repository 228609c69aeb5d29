package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// commands returns every command under root, root included, but cobra's hidden ones.
func commands(root *cobra.Command) []*cobra.Command {
	all := []*cobra.Command{root}
	for _, c := range root.Commands() {
		if !c.Hidden {
			all = append(all, commands(c)...)
		}
	}
	return all
}

func TestEveryCommandHasAnExample(t *testing.T) {
	t.Parallel()
	all := commands(newRootCommand(&globals{}))
	if len(all) < 15 {
		t.Fatalf("found %d commands; the walk is broken", len(all))
	}
	for _, c := range all {
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no Example: add one to its cobra.Command", c.CommandPath())
		}
	}
}

// Every `kplug ...` line of an example names a command that exists and only flags that
// command has, so that examples cannot go stale.
func TestExamplesNameRealCommandsAndFlags(t *testing.T) {
	t.Parallel()
	root := newRootCommand(&globals{})
	flagRE := regexp.MustCompile(`^--?([a-zA-Z0-9][a-zA-Z0-9-]*)`)
	checked := 0
	for _, c := range commands(root) {
		for _, line := range exampleCommands(c.Example) {
			words := strings.Fields(line)
			i := slices.Index(words, "kplug")
			if i < 0 {
				continue
			}
			cmd, rest := root, words[i+1:]
			for len(rest) > 0 {
				sub := subcommand(cmd, rest[0])
				if sub == nil {
					break
				}
				cmd, rest = sub, rest[1:]
			}
			checked++
			for _, w := range rest {
				if w == "--" || strings.ContainsAny(w[:1], "|><#;") {
					break // the wrapped command, a pipe or a comment
				}
				m := flagRE.FindStringSubmatch(w)
				if m == nil {
					continue
				}
				if f := lookupFlag(cmd, m[1]); f == nil {
					t.Errorf("the example of %q runs %q with %s, which that command does not have:\n%s", c.CommandPath(), cmd.CommandPath(), w, line)
				}
			}
		}
	}
	if checked < 15 {
		t.Errorf("checked %d example lines; the parser is broken", checked)
	}
}

// exampleCommands joins an example's continued lines (ending in a backslash).
func exampleCommands(example string) []string {
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(example, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasSuffix(l, `\`) {
			cur.WriteString(strings.TrimSuffix(l, `\`) + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	return lines
}

func subcommand(c *cobra.Command, name string) *cobra.Command {
	for _, s := range c.Commands() {
		if s.Name() == name || slices.Contains(s.Aliases, name) {
			return s
		}
	}
	return nil
}

func lookupFlag(c *cobra.Command, name string) *pflag.Flag {
	for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags(), c.InheritedFlags()} {
		f := fs.Lookup(name)
		if len(name) == 1 {
			f = fs.ShorthandLookup(name)
		}
		if f != nil {
			return f
		}
	}
	return nil
}

func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for shell, marker := range map[string]string{
		"bash":       "__start_kplug()",
		"zsh":        "#compdef kplug",
		"fish":       "complete -c kplug ",
		"powershell": "Register-ArgumentCompleter -CommandName 'kplug'",
	} {
		code, out, errOut := run(t, "completion", shell)
		if code != ExitOK || errOut != "" || !strings.Contains(out, marker) {
			t.Errorf("completion %s: code %d, stderr %q, script without %q (%d bytes)", shell, code, errOut, marker, len(out))
		}
		if shell != "bash" {
			continue
		}
		script := filepath.Join(t.TempDir(), "kplug.bash")
		if err := os.WriteFile(script, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
			t.Errorf("bash -n on the bash completion script: %v\n%s", err, out)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"completion"}, "Error: want one shell, got 0 arguments: bash, zsh, fish or powershell\nRun 'kplug completion --help' for usage.\n"},
		{[]string{"completion", "tcsh"}, "Error: unknown shell \"tcsh\": want bash, zsh, fish or powershell\nRun 'kplug completion --help' for usage.\n"},
	} {
		code, out, errOut := run(t, tt.args...)
		if code != ExitUsage || out != "" || errOut != tt.want {
			t.Errorf("kplug %v: code %d, stdout %q, stderr %q, want %q", tt.args, code, out, errOut, tt.want)
		}
	}
}

// TestBashCompletes loads the bash script into bash with bash-completion, as a user's
// shell does, and completes command lines through kplug itself (the test binary).
func TestBashCompletes(t *testing.T) {
	t.Parallel()
	const bashCompletion = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(bashCompletion); err != nil {
		t.Skipf("bash-completion is not installed (%v); make deps installs it", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	wrapper := "#!/bin/sh\n" + kplugEnv + "=1 exec '" + exe + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "kplug"), []byte(wrapper), 0o700); err != nil {
		t.Fatal(err)
	}
	complete := `source ` + bashCompletion + `
source <(kplug completion bash)
complete_line() {
	COMP_LINE=$1; COMP_POINT=${#COMP_LINE}
	read -r -a COMP_WORDS <<<"$COMP_LINE"
	[[ $COMP_LINE == *' ' ]] && COMP_WORDS+=('')
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()
	__start_kplug kplug 2>/dev/null
	echo "$COMP_LINE=>${COMPREPLY[*]}"
}
complete_line 'kplug image-credential v'
complete_line 'kplug completion '
complete_line 'kplug version -o '
complete_line 'kplug exec-cache --list --output '
complete_line 'kplug peerproxy --peer-tls-'
`
	cmd := exec.Command("bash", "-c", complete)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	want := `kplug image-credential v=>validate
kplug completion =>bash zsh fish powershell
kplug version -o =>text json yaml
kplug exec-cache --list --output =>text json yaml
kplug peerproxy --peer-tls-=>--peer-tls-cert-file --peer-tls-private-key-file
`
	if string(out) != want {
		t.Errorf("completions:\n%s\nwant\n%s", out, want)
	}
}
