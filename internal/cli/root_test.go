package cli

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kplug/kplug/internal/version"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runIn(t, "", args...)
}

// runIn runs kplug with args and stdin, returning the exit code and both outputs.
func runIn(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(t.Context(), args, IO{In: strings.NewReader(stdin), Out: &out, Err: &errOut})
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	t.Parallel()
	want := fmt.Sprintf("kplug: devel\ngo: %s\nplatform: %s/%s\nkubernetes: %s (tested against)\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, version.Kubernetes)
	code, out, errOut := run(t, "version")
	if code != ExitOK || out != want || errOut != "" {
		t.Errorf("kplug version: code %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}
	code, out, _ = run(t, "version", "-o", "json")
	wantJSON := fmt.Sprintf("{\n  \"kplug\": \"devel\",\n  \"go\": %q,\n  \"platform\": \"%s/%s\",\n  \"kubernetes\": %q\n}\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, version.Kubernetes)
	if code != ExitOK || out != wantJSON {
		t.Errorf("kplug version -o json: code %d, stdout %q, want %q", code, out, wantJSON)
	}
	code, out, _ = run(t, "version", "-o", "yaml")
	wantYAML := fmt.Sprintf("go: %s\nkplug: devel\nkubernetes: %s\nplatform: %s/%s\n",
		runtime.Version(), version.Kubernetes, runtime.GOOS, runtime.GOARCH)
	if code != ExitOK || out != wantYAML {
		t.Errorf("kplug version -o yaml: code %d, stdout %q, want %q", code, out, wantYAML)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"verson"}, "Error: unknown command \"verson\" for \"kplug\"; did you mean version?\nRun 'kplug --help' for usage.\n"},
		{[]string{"version", "--bogus"}, "Error: unknown flag: --bogus\nRun 'kplug version --help' for usage.\n"},
		{[]string{"version", "extra"}, "Error: unknown command \"extra\" for \"kplug version\"\nRun 'kplug version --help' for usage.\n"},
		{[]string{"version", "-o", "xml"}, "Error: invalid --output \"xml\": want text, json or yaml\nRun 'kplug version --help' for usage.\n"},
		{[]string{"-v", "lots", "version"}, "Error: invalid argument \"lots\" for \"-v, --v\" flag: strconv.ParseInt: parsing \"lots\": invalid syntax\nRun 'kplug version --help' for usage.\n"},
	}
	for _, tt := range tests {
		code, out, errOut := run(t, tt.args...)
		if code != ExitUsage || out != "" || errOut != tt.wantStderr {
			t.Errorf("kplug %s: code %d (want %d)\nstdout %q\nstderr %q\nwant   %q", strings.Join(tt.args, " "), code, ExitUsage, out, errOut, tt.wantStderr)
		}
	}
}

// TestUnknownCommandBeforeFlags covers issue 32 item 6: `kplug exec-cahce --list` said
// "unknown flag: --list", because cobra parsed the rest of the line as the root's flags
// before it looked at the mistyped name. At every level, the name is reported first.
func TestUnknownCommandBeforeFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"exec-cahce", "--list"}, "Error: unknown command \"exec-cahce\" for \"kplug\"; did you mean exec-cache?\nRun 'kplug --help' for usage.\n"},
		{[]string{"-v", "4", "exec-cahce", "--list"}, "Error: unknown command \"exec-cahce\" for \"kplug\"; did you mean exec-cache?\nRun 'kplug --help' for usage.\n"},
		{[]string{"exec-cahce", "--help"}, "Error: unknown command \"exec-cahce\" for \"kplug\"; did you mean exec-cache?\nRun 'kplug --help' for usage.\n"},
		{[]string{"image-credential", "gett", "--config", "x", "--pod=a/b"}, "Error: unknown command \"gett\" for \"kplug image-credential\"; did you mean get?\nRun 'kplug image-credential --help' for usage.\n"},
		{[]string{"image-credential", "docker-helper", "gt", "--bogus"}, "Error: unknown command \"gt\" for \"kplug image-credential docker-helper\"; did you mean get?\nRun 'kplug image-credential docker-helper --help' for usage.\n"},
		{[]string{"key", "--v=2", "creat", "-o", "json"}, "Error: unknown command \"creat\" for \"kplug key\"; did you mean create?\nRun 'kplug key --help' for usage.\n"},
		{[]string{"image-credential", "zzz"}, "Error: unknown command \"zzz\" for \"kplug image-credential\"\nRun 'kplug image-credential --help' for usage.\n"},
		// A flag before any name is still the flag's error: it may take the next argument.
		{[]string{"--bogus", "exec-cahce"}, "Error: unknown flag: --bogus\nRun 'kplug --help' for usage.\n"},
	}
	for _, tt := range tests {
		code, out, errOut := run(t, tt.args...)
		if code != ExitUsage || out != "" || errOut != tt.wantStderr {
			t.Errorf("kplug %s: code %d (want %d)\nstdout %q\nstderr %q\nwant   %q", strings.Join(tt.args, " "), code, ExitUsage, out, errOut, tt.wantStderr)
		}
	}
	// What is not a mistyped name still works: help, global flags before a command,
	// the help command, completion.
	for _, args := range [][]string{{"--help"}, {"-v", "4", "version"}, {"--v=4", "version", "-o", "json"}, {"help", "exec-cache"},
		{"image-credential", "--help"}, {"__complete", "exec-c"}} {
		code, out, errOut := run(t, args...)
		if code != ExitOK || out == "" || strings.Contains(errOut, "Error") {
			t.Errorf("kplug %s: code %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
}

func TestFailureExitsOneAndLogsGoToStderr(t *testing.T) {
	t.Parallel()
	g := &globals{}
	root := newRootCommand(g)
	root.AddCommand(&cobra.Command{
		Use: "fail",
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.log.Info("working")
			g.log.Debug("details")
			fmt.Fprintln(cmd.OutOrStdout(), "partial result")
			return errors.New("execcred: plugin \"x\" exited with code 3")
		},
	})
	for _, tt := range []struct {
		args      []string
		wantDebug bool
	}{{[]string{"fail"}, false}, {[]string{"fail", "-v=4"}, true}, {[]string{"--v", "3", "fail"}, false}} {
		var out, errOut bytes.Buffer
		g.io = IO{Out: &out, Err: &errOut}
		code := execute(t.Context(), root, tt.args, g.io)
		if code != ExitFailure {
			t.Errorf("%v: code %d, want %d", tt.args, code, ExitFailure)
		}
		if out.String() != "partial result\n" {
			t.Errorf("%v: stdout %q", tt.args, out.String())
		}
		stderr := errOut.String()
		if !strings.Contains(stderr, "level=INFO msg=working") || strings.Contains(stderr, "msg=details") != tt.wantDebug ||
			!strings.HasSuffix(stderr, "Error: execcred: plugin \"x\" exited with code 3\n") {
			t.Errorf("%v: stderr %q", tt.args, stderr)
		}
	}
}
