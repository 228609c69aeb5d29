package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

// writeKuberc writes a v1beta1 kuberc with the given policy lines and returns its path.
func writeKuberc(t *testing.T, policy string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kuberc")
	doc := "apiVersion: kubectl.config.k8s.io/v1beta1\nkind: Preference\n" + policy
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func allowlistKuberc(t *testing.T, commands ...string) string {
	t.Helper()
	lines := "credentialPluginPolicy: Allowlist\ncredentialPluginAllowlist:\n"
	for _, c := range commands {
		lines += fmt.Sprintf("- command: %q\n", c)
	}
	return writeKuberc(t, lines)
}

// kplug's client commands apply kuberc's policy as kubectl does: a denied plugin is a
// failure in client-go's words and does not run; an invalid policy or an unusable named
// kuberc is a configuration error.
func TestClientCommandsApplyKubercPolicy(t *testing.T) {
	t.Parallel()
	srv := apiServer(t)
	kc, plugin := writePluginKubeconfig(t, srv, tokenCredential)
	denyAll := writeKuberc(t, "credentialPluginPolicy: DenyAll\n")
	empty := writeKuberc(t, "credentialPluginPolicy: Allowlist\ncredentialPluginAllowlist: []\n")
	missing := filepath.Join(t.TempDir(), "kuberc")
	exe := plugin.Path()
	tests := []struct {
		args       []string
		wantCode   int
		wantStderr string
	}{
		{[]string{"credential", "--kuberc", denyAll}, ExitFailure, `Error: execcred: plugin "` + exe + `" not allowed: policy set to "DenyAll"` + "\n"},
		{[]string{"request", "--kuberc", denyAll, "/ok"}, ExitFailure, `Error: execcred: plugin "` + exe + `" not allowed: policy set to "DenyAll"` + "\n"},
		{[]string{"run", "--kuberc", denyAll, "--", "true"}, ExitFailure, `Error: execcred: plugin "` + exe + `" not allowed: policy set to "DenyAll"` + "\n"},
		{[]string{"credential", "--kuberc", allowlistKuberc(t, "kubelogin")}, ExitFailure, `Error: execcred: plugin path "` + exe + `" is not permitted by the credential plugin allowlist` + "\n"},
		{[]string{"credential", "--kuberc", empty}, ExitUsage, "Error: kuberc: " + empty + `: invalid plugin policy: credential plugin policy set to "Allowlist", but allowlist is empty; use "DenyAll" policy instead` + "\n"},
		{[]string{"credential", "--kuberc", missing}, ExitUsage, "Error: kuberc: open " + missing + ": no such file or directory\n"},
	}
	for _, tt := range tests {
		args := append([]string{tt.args[0], "--kubeconfig", kc}, tt.args[1:]...)
		code, out, errOut := run(t, args...)
		if code != tt.wantCode || out != "" || errOut != tt.wantStderr {
			t.Errorf("kplug %s: code %d (want %d)\nstdout %q\nstderr %q\nwant   %q", strings.Join(tt.args, " "), code, tt.wantCode, out, errOut, tt.wantStderr)
		}
	}
	if n := plugin.Runs(); n != 0 {
		t.Fatalf("a denied plugin ran %d times", n)
	}
	code, out, errOut := run(t, "request", "--kubeconfig", kc, "--kuberc", allowlistKuberc(t, "kubelogin", exe), "/ok")
	if code != ExitOK || out != `{"method":"GET","body":""}` || errOut != "" {
		t.Errorf("allowed: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestExecCacheAppliesKubercPolicy: `kplug exec-cache -- X` applies the kuberc policy
// to X, before running it and before serving an answer X produced, so that wrapping a
// plugin in exec-cache (which the client's own check sees instead of X) does not launder
// it. It sets the process environment, so it is not parallel.
func TestExecCacheAppliesKubercPolicy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	info, err := execcred.ExecInfo(execcred.V1, false, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(execcred.InfoEnv, string(info))
	plugin := exectest.New(t).Stdout(tokenCredential)
	t.Setenv(exectest.Env, plugin.Dir)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBERC", "")
	exe := plugin.Path()
	allow, deny := allowlistKuberc(t, "kplug", exe), allowlistKuberc(t, "kplug")
	wrap := func(flags ...string) []string {
		return append(append([]string{"exec-cache", "--cache-dir", dir}, flags...), "--", exe)
	}

	// Allowed: run once, and the answer is cached.
	if code, out, errOut := run(t, wrap("--kuberc", allow)...); code != ExitOK || out != tokenCredential || errOut != "" {
		t.Fatalf("allowed: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	denied := "Error: exec-cache: the credential plugin policy in " + deny + " (Allowlist [kplug]) does not allow the wrapped plugin: plugin path \"" +
		exe + "\" is not permitted by the credential plugin allowlist\n"
	check := func(what string, wantCode int, wantStderr string, flags ...string) {
		t.Helper()
		runs := plugin.Runs()
		code, out, errOut := run(t, wrap(flags...)...)
		wantOut := ""
		if wantCode == ExitOK {
			wantOut = tokenCredential
		}
		if code != wantCode || out != wantOut || errOut != wantStderr {
			t.Errorf("%s: code %d (want %d)\nstdout %q\nstderr %q\nwant   %q", what, code, wantCode, out, errOut, wantStderr)
		}
		if wantCode != ExitOK && plugin.Runs() != runs {
			t.Errorf("%s: the wrapped plugin ran", what)
		}
	}
	// Denied: the cached answer X produced is not served, and X does not run. (Served
	// or not is also checked where the client is not always the same process: in
	// internal/execcache, and end to end with kubectl.)
	check("--kuberc denying", ExitFailure, denied, "--kuberc", deny)
	t.Setenv("KUBERC", deny)
	check("KUBERC denying", ExitFailure, denied)
	// Policies add up: the exec block's own --kuberc cannot replace the one KUBERC names.
	check("--kuberc does not replace KUBERC", ExitFailure, denied, "--kuberc", allow)
	t.Setenv("KUBERC", "off")
	check("KUBERC=off", ExitOK, "")
	check("KUBERC=off and --kuberc", ExitOK, "", "--kuberc", allow)
	t.Setenv("KUBERC", "")
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".kube", "kuberc"), []byte("apiVersion: kubectl.config.k8s.io/v1beta1\nkind: Preference\ncredentialPluginPolicy: DenyAll\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("~/.kube/kuberc denying", ExitFailure, "Error: exec-cache: the credential plugin policy in "+filepath.Join(home, ".kube", "kuberc")+
		" (DenyAll) does not allow the wrapped plugin: plugin \""+exe+"\" not allowed: policy set to \"DenyAll\"\n")
	t.Setenv("KUBECTL_KUBERC", "false")
	check("KUBECTL_KUBERC=false", ExitOK, "")
}

// TestExecCacheLeftoverAllowlist (kubernetes/kubernetes#142564): a kuberc that kubectl
// kuberc set before 1.38 wrote, with the allowlist of an earlier Allowlist policy left
// beside AllowAll, is still refused as client-go refuses it, with exit 2 and one line that
// names the file, the list and what to do; the wrapped plugin does not run. It sets the
// process environment, so it is not parallel.
func TestExecCacheLeftoverAllowlist(t *testing.T) {
	plugin := exectest.New(t).Stdout(tokenCredential)
	t.Setenv(exectest.Env, plugin.Dir)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERC", "")
	leftover := writeKuberc(t, "credentialPluginAllowlist:\n- command: cloud-credential-helper\ncredentialPluginPolicy: AllowAll\n")
	code, out, errOut := run(t, "exec-cache", "--cache-dir", filepath.Join(t.TempDir(), "cache"), "--kuberc", leftover, "--", plugin.Path())
	want := "Error: kuberc: " + leftover + `: invalid plugin policy: misconfigured credential plugin allowlist: plugin policy is "AllowAll" but allowlist is non-nil; ` +
		`credentialPluginAllowlist ["cloud-credential-helper"] is left over beside credentialPluginPolicy: AllowAll (kubectl kuberc set before 1.38 keeps the list when it changes the policy): ` +
		"delete the list, or set credentialPluginPolicy: Allowlist to use it\n"
	if code != ExitUsage || out != "" || errOut != want {
		t.Errorf("code %d (want %d)\nstdout %q\nstderr %q\nwant   %q", code, ExitUsage, out, errOut, want)
	}
	if n := plugin.Runs(); n != 0 {
		t.Errorf("the wrapped plugin ran %d times", n)
	}
}
