package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

func TestExecCacheUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"exec-cache"}, "no plugin to run: give it after --, e.g. kplug exec-cache -- aws-iam-authenticator token -i my-cluster"},
		{[]string{"exec-cache", "--list", "--clear"}, "--list and --clear cannot be combined"},
		{[]string{"exec-cache", "--all"}, "--all only goes with --clear"},
		{[]string{"exec-cache", "--clear"}, "--clear needs the wrapped command (--clear -- COMMAND [ARGS...]) or --all"},
		{[]string{"exec-cache", "--clear", "--all", "--", "x"}, "--clear --all takes no command; to remove one command's entries, drop --all"},
		{[]string{"exec-cache", "--list", "-o", "xml"}, `invalid --output "xml": want text, json or yaml`},
		{[]string{"exec-cache", "--skew=-1s", "--", "x"}, "invalid --skew -1s: must not be negative"},
		{[]string{"exec-cache", "--default-ttl=25h", "--", "x"}, "invalid --default-ttl 25h0m0s: want 0 (do not cache answers without expiry) up to 24h0m0s"},
		{[]string{"exec-cache", "--default-ttl=-1m", "--", "x"}, "invalid --default-ttl -1m0s: want 0 (do not cache answers without expiry) up to 24h0m0s"},
		{[]string{"exec-cache", "--lock-timeout=0s", "--", "x"}, "invalid --lock-timeout 0s: must be positive"},
		{[]string{"exec-cache", "--ignore-env=A=B", "--", "x"}, `invalid --ignore-env "A=B": want a variable name or a NAME* prefix`},
		{[]string{"exec-cache", "--skew", "soon", "--", "x"}, `invalid argument "soon" for "--skew" flag: time: invalid duration "soon"`},
		{[]string{"exec-cache", "--storage", "disk", "--", "x"}, `invalid --storage "disk": want one of file, keyring, secret-service, kernel-keyring, none`},
		{[]string{"exec-cache", "--key-env=*", "--", "x"}, `invalid --key-env "*": want a variable name or a NAME* prefix`},
		{[]string{"exec-cache", "--failure-window=11m", "--", "x"}, "invalid --failure-window 11m0s: want 0 (off) up to 10m0s"},
		{[]string{"exec-cache", "--wait-for-login=-1s", "--", "x"}, "invalid --wait-for-login -1s: want 0 (off) up to 10m0s"},
		{[]string{"exec-cache", "--serve", "--list"}, "--serve cannot be combined with --list or --clear"},
		{[]string{"exec-cache", "--serve", "--", "x"}, "--serve takes no command: the agent serves what the exec blocks of this machine's kubeconfig name"},
		{[]string{"exec-cache", "--agent", "/tmp/a.sock", "--clear", "--all"}, "--agent cannot be combined with --list or --clear: the agent's cache is listed and cleared on the machine it runs on"},
	}
	for _, tt := range tests {
		code, out, errOut := run(t, tt.args...)
		want := "Error: " + tt.want + "\nRun 'kplug exec-cache --help' for usage.\n"
		if code != ExitUsage || out != "" || errOut != want {
			t.Errorf("kplug %s: code %d\nstdout %q\nstderr %q\nwant   %q", strings.Join(tt.args, " "), code, out, errOut, want)
		}
	}
}

// TestExecCacheCommand runs the wrapper through the CLI around the fake plugin, then
// lists and clears its entries. It sets the process environment, so it is not parallel.
func TestExecCacheCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	info, err := execcred.ExecInfo(execcred.V1, false, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(execcred.InfoEnv, string(info))
	plugin := exectest.New(t).Stdout(tokenCredential)
	t.Setenv(exectest.Env, plugin.Dir)
	wrap := []string{"exec-cache", "--cache-dir", dir, "--", os.Args[0], "--some-plugin-flag"}

	code, out, errOut := run(t, wrap...)
	if code != ExitOK || out != tokenCredential || errOut != "" {
		t.Fatalf("exec-cache: code %d, stdout %q, stderr %q", code, out, errOut)
	}

	code, out, errOut = run(t, "exec-cache", "--cache-dir", dir, "--list")
	want := regexp.MustCompile(`^ENTRY +COMMAND +API +CLUSTER +CREDENTIAL +STORAGE +SERVED UNTIL +CLIENTS
[0-9a-f]{12}  ` + regexp.QuoteMeta(os.Args[0]) + ` --some-plugin-flag  v1 +- +token \(29 bytes\)  file +2099-01-02T03:03:05Z \(in \d+ days\)  1
$`)
	if code != ExitOK || !want.MatchString(out) || errOut != "" {
		t.Errorf("--list: code %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	code, out, _ = run(t, "exec-cache", "--cache-dir", dir, "--list", "-o", "json")
	var listed []map[string]any
	if err := json.Unmarshal([]byte(out), &listed); code != ExitOK || err != nil || len(listed) != 1 || listed[0]["credential"] != "token (29 bytes)" {
		t.Errorf("--list -o json: code %d, %v: %s", code, err, out)
	}
	if strings.Contains(out, "0123456789abcdef") {
		t.Error("--list printed the token")
	}
	code, out, _ = run(t, "exec-cache", "--cache-dir", dir, "--list", "-o", "yaml")
	if code != ExitOK || !strings.HasPrefix(out, "- apiVersion: client.authentication.k8s.io/v1\n  args:\n  - --some-plugin-flag\n  clients: 1\n") ||
		!strings.Contains(out, "\n  credential: token (29 bytes)\n") || strings.Contains(out, "0123456789abcdef") {
		t.Errorf("--list -o yaml: code %d:\n%s", code, out)
	}

	t.Setenv(execcred.InfoEnv, "") // --clear is run by the user, not by a client
	code, out, _ = run(t, "exec-cache", "--cache-dir", dir, "--clear", "--", os.Args[0], "--some-plugin-flag")
	if code != ExitOK || out != "removed 1 entry from "+dir+"\n" {
		t.Errorf("--clear: code %d, stdout %q", code, out)
	}
	t.Setenv(execcred.InfoEnv, string(info))

	// A failing plugin: its stdout, stderr and exit code, as they were, and a word for a
	// client without a terminal; then, within the failure window, its exit code and why.
	plugin.Exit(4).Stderr("plugin: login required\n").Stdout(`{"kind":"Status"}`)
	code, out, errOut = run(t, wrap...)
	if code != 4 || out != `{"kind":"Status"}` || !strings.HasPrefix(errOut, "plugin: login required\nexec-cache: ") || !strings.Contains(errOut, " ran without a terminal") {
		t.Errorf("failing plugin: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, wrap...)
	if code != 4 || out != "" || !strings.Contains(errOut, "\nError: exec-cache: "+os.Args[0]+" failed with exit code 4 ") {
		t.Errorf("within the failure window: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	t.Setenv(execcred.InfoEnv, "")
	code, out, _ = run(t, "exec-cache", "--cache-dir", dir, "--clear", "--all")
	if code != ExitOK || out != "removed 1 entry from "+dir+"\n" {
		t.Errorf("--clear --all after a failure: code %d, stdout %q", code, out)
	}

	// A plugin that is not there: one error line, exit 1.
	missing := filepath.Join(t.TempDir(), "missing")
	code, out, errOut = run(t, "exec-cache", "--cache-dir", dir, "--", missing)
	if code != ExitFailure || out != "" || errOut != `Error: exec-cache: plugin "`+missing+`" not found: `+missing+" does not exist\n" {
		t.Errorf("missing plugin: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestExecCacheHonoursKUBECACHEDIR: without --cache-dir, entries live in
// $KUBECACHEDIR/kplug/exec-cache, beside kubectl's http and discovery caches; --cache-dir
// still wins.
func TestExecCacheHonoursKUBECACHEDIR(t *testing.T) {
	kcd := t.TempDir()
	t.Setenv("KUBECACHEDIR", kcd)
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // where the entries would go otherwise
	info, err := execcred.ExecInfo(execcred.V1, false, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(execcred.InfoEnv, string(info))
	plugin := exectest.New(t).Stdout(tokenCredential)
	t.Setenv(exectest.Env, plugin.Dir)
	if code, out, errOut := run(t, "exec-cache", "--", os.Args[0]); code != ExitOK || out != tokenCredential {
		t.Fatalf("exec-cache: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	entries, err := filepath.Glob(filepath.Join(kcd, "kplug", "exec-cache", "*.json"))
	if err != nil || len(entries) != 1 {
		t.Errorf("entries under $KUBECACHEDIR/kplug/exec-cache: %v, %v; want 1", entries, err)
	}
	other := filepath.Join(t.TempDir(), "cache")
	if code, _, errOut := run(t, "exec-cache", "--cache-dir", other, "--", os.Args[0]); code != ExitOK {
		t.Fatalf("exec-cache --cache-dir: code %d, stderr %q", code, errOut)
	}
	if entries, _ := filepath.Glob(filepath.Join(other, "*.json")); len(entries) != 1 {
		t.Errorf("entries in --cache-dir: %v, want 1", entries)
	}
	t.Setenv(execcred.InfoEnv, "")
	if code, out, _ := run(t, "exec-cache", "--clear", "--all"); code != ExitOK || out != "removed 1 entry from "+filepath.Join(kcd, "kplug", "exec-cache")+"\n" {
		t.Errorf("--clear --all: code %d, stdout %q", code, out)
	}
}
