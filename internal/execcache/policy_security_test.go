//go:build !windows

package execcache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kplug/kplug/execcred/wire"
)

// launder is a setup for issue 27's N1: an allowlist that names plug, the allowed plug in
// a directory on the client's PATH, and a planted plug (which writes a marker file when
// it runs) in a directory the kubeconfig's author chose.
type launder struct {
	t        *testing.T
	trusted  string // the client's PATH
	planted  string // the attacker's directory, with its plug
	marker   string
	kuberc   string // allowlist: kplug-exec-cache, plug
	denyPlug string // allowlist: kplug-exec-cache only
	plugin   interface{ Runs() int }
	env      []string // the fake plugin's switch and KUBERNETES_EXEC_INFO
}

func newLaunder(t *testing.T) *launder {
	plugin := fakePlugin(t)
	dir := t.TempDir()
	l := &launder{t: t, trusted: filepath.Join(dir, "bin"), planted: filepath.Join(dir, "repo"), marker: filepath.Join(dir, "planted-ran"), plugin: plugin}
	for _, d := range []string{l.trusted, l.planted} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(plugin.Path(), filepath.Join(l.trusted, "plug")); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\ntouch '" + l.marker + "'\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"planted\"}}'\n"
	if err := os.WriteFile(filepath.Join(l.planted, "plug"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	doc := "apiVersion: kubectl.config.k8s.io/v1beta1\nkind: Preference\ncredentialPluginPolicy: Allowlist\ncredentialPluginAllowlist:\n- command: kplug-exec-cache\n"
	l.kuberc, l.denyPlug = filepath.Join(dir, "kuberc"), filepath.Join(dir, "kuberc-deny")
	for path, body := range map[string]string{l.kuberc: doc + "- command: plug\n", l.denyPlug: doc} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l.env = append(plugin.Env(), execInfoEnv(t, wire.V1, nil, nil))
	return l
}

// run runs exec-cache as the client would have it run: the client's environment (the
// Caller) plus the exec block's env, and returns its output and error.
func (l *launder) run(caller Caller, execEnv []string, accountHome string, args ...string) (string, error) {
	l.t.Helper()
	c := &Command{}
	fs := pflag.NewFlagSet("exec-cache", pflag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse(append([]string{"--cache-dir", filepath.Join(l.t.TempDir(), "cache"), "--"}, args...)); err != nil {
		l.t.Fatal(err)
	}
	env := append(append(append([]string{}, caller.Environ...), l.env...), execEnv...)
	var out, errOut bytes.Buffer
	err := c.Run(l.t.Context(), fs.Args(), Process{Environ: env, Stdout: &out, Stderr: &errOut, Caller: caller, AccountHome: accountHome})
	return out.String(), err
}

func (l *launder) plantedRan() bool {
	_, err := os.Stat(l.marker)
	return err == nil
}

func (l *launder) client(env ...string) Caller {
	return Caller{Environ: append([]string{"PATH=" + l.trusted, "HOME=" + l.t.TempDir()}, env...), Args: []string{"kubectl", "get", "ns"}}
}

// TestSecurityExecCacheRunsTheFileThePolicyApproved (issue 27, N1a): ./plug and
// bin/../plug clean to the listed name plug. exec-cache used to approve the name and run
// ./plug from the working directory; kubectl refuses that file named directly. Now the
// file is checked where it is, and refused.
func TestSecurityExecCacheRunsTheFileThePolicyApproved(t *testing.T) {
	l := newLaunder(t)
	t.Chdir(l.planted)
	if err := os.Mkdir("bin", 0o700); err != nil {
		t.Fatal(err)
	}
	for _, command := range []string{"./plug", "bin/../plug"} {
		out, err := l.run(l.client("KUBERC="+l.kuberc), nil, "", command)
		want := `exec-cache: the credential plugin policy in ` + l.kuberc + ` (Allowlist [kplug-exec-cache plug]) does not allow the wrapped plugin: plugin path "` +
			filepath.Join(l.planted, "plug") + `" is not permitted by the credential plugin allowlist`
		var pe *PolicyError
		if !errors.As(err, &pe) || err.Error() != want || out != "" {
			t.Errorf("%s: %q, %v\nwant %s", command, out, err, want)
		}
	}
	if l.plantedRan() {
		t.Fatal("the planted plugin ran")
	}
	// The listed name is the file the client's PATH gives.
	if out, err := l.run(l.client("KUBERC="+l.kuberc), nil, "", "plug"); err != nil || !strings.Contains(out, "tok-") {
		t.Fatalf("plug: %q, %v; want the allowed plug's answer", out, err)
	}
}

// TestSecurityExecCacheIgnoresTheExecBlocksPATH (issue 27, N1b): an exec block's
// env: [{name: PATH, value: <attacker dir>}] chose which file the listed name plug was.
// kubectl resolves the exec block's command in its own PATH; so does exec-cache now, for
// the command it wraps and for the allowlist's names.
func TestSecurityExecCacheIgnoresTheExecBlocksPATH(t *testing.T) {
	l := newLaunder(t)
	out, err := l.run(l.client("KUBERC="+l.kuberc), []string{"PATH=" + l.planted}, "", "plug")
	if err != nil || !strings.Contains(out, "tok-") || l.plantedRan() {
		t.Fatalf("%q, %v, planted ran: %v; want the client's plug to answer", out, err, l.plantedRan())
	}
	if n := l.plugin.Runs(); n != 1 {
		t.Fatalf("the allowed plug ran %d times, want 1", n)
	}
	// The planted file named by its path is refused, although an entry has its base name.
	_, err = l.run(l.client("KUBERC="+l.kuberc), []string{"PATH=" + l.planted}, "", filepath.Join(l.planted, "plug"))
	if !errors.As(err, new(*PolicyError)) || l.plantedRan() {
		t.Fatalf("planted path: %v, planted ran: %v; want a denial", err, l.plantedRan())
	}
}

// TestSecurityExecCacheAppliesTheClientsKuberc (issue 27, N1c and N1d): the exec block's
// env set KUBERC=off (or KUBECTL_KUBERC=false, or another HOME) and dropped the policy the
// client applies; kubectl's --kuberc flag never reached exec-cache; and where HOME is not
// the account's home in the user database (or the uid has none, AccountHome ""), the
// account-home safeguard found nothing. The client's own environment and flags decide now.
func TestSecurityExecCacheAppliesTheClientsKuberc(t *testing.T) {
	l := newLaunder(t)
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	deny, err := os.ReadFile(l.denyPlug)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".kube", "kuberc"), deny, 0o600); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	for _, tt := range []struct {
		name    string
		caller  Caller
		execEnv []string
		file    string // the policy that must deny
	}{
		{"KUBERC=off in the exec block", l.client("KUBERC=" + l.denyPlug), []string{"KUBERC=off"}, l.denyPlug},
		{"KUBECTL_KUBERC=false in the exec block", l.client("KUBERC=" + l.denyPlug), []string{"KUBECTL_KUBERC=false"}, l.denyPlug},
		{"KUBERC=other in the exec block", l.client("KUBERC=" + l.denyPlug), []string{"KUBERC=" + l.kuberc}, l.denyPlug},
		{"HOME elsewhere, no account home", Caller{Environ: []string{"PATH=" + l.trusted, "HOME=" + home}, Args: []string{"kubectl"}}, []string{"HOME=" + other, "KUBERC=off"}, filepath.Join(home, ".kube", "kuberc")},
		{"kubectl --kuberc FILE", Caller{Environ: []string{"PATH=" + l.trusted, "HOME=" + other}, Args: []string{"kubectl", "--kuberc", l.denyPlug, "get", "ns"}}, []string{"KUBERC=off"}, l.denyPlug},
		{"kubectl --kuberc=FILE", Caller{Environ: []string{"PATH=" + l.trusted, "HOME=" + other}, Args: []string{"kubectl", "get", "--kuberc=" + l.denyPlug, "ns"}}, nil, l.denyPlug},
	} {
		out, err := l.run(tt.caller, tt.execEnv, "", "plug")
		var pe *PolicyError
		if !errors.As(err, &pe) || pe.File != tt.file || out != "" {
			t.Errorf("%s: %q, %v; want the policy in %s to deny", tt.name, out, err, tt.file)
		}
	}
	if n := l.plugin.Runs(); n != 0 {
		t.Fatalf("the denied plugin ran %d times", n)
	}
}

// Where the client cannot be read, a restricting policy resolves no bare name (the only
// PATH left is one the exec block may have set), and still allows a listed absolute path.
func TestExecCacheUnknownClientFailsClosed(t *testing.T) {
	l := newLaunder(t)
	unknown := Caller{Err: errors.New("not supported here")}
	_, err := l.run(unknown, []string{"PATH=" + l.planted, "KUBERC=" + l.kuberc}, "", "plug")
	want := `exec-cache: the credential plugin policy in ` + l.kuberc + ` (Allowlist [kplug-exec-cache plug]) does not allow the wrapped plugin: plugin path "plug" cannot be resolved for credential plugin allowlist check: exec: "plug": the client's PATH is unknown (not supported here), so exec-cache resolves no plugin name; give the plugin's absolute path after -- and list that path in the allowlist`
	if err == nil || err.Error() != want || l.plantedRan() {
		t.Fatalf("%v\nwant %s", err, want)
	}
	abs := filepath.Join(t.TempDir(), "kuberc")
	if err := os.WriteFile(abs, []byte("apiVersion: kubectl.config.k8s.io/v1beta1\nkind: Preference\ncredentialPluginPolicy: Allowlist\ncredentialPluginAllowlist:\n- command: "+filepath.Join(l.trusted, "plug")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := l.run(unknown, []string{"PATH=" + l.planted, "KUBERC=" + abs}, "", filepath.Join(l.trusted, "plug")); err != nil || !strings.Contains(out, "tok-") {
		t.Fatalf("absolute path: %q, %v", out, err)
	}
	// Without a restricting policy, names resolve in the only PATH there is.
	if out, err := l.run(unknown, []string{"PATH=" + l.trusted}, "", "plug"); err != nil || !strings.Contains(out, "tok-") {
		t.Fatalf("no policy: %q, %v", out, err)
	}
}

// TestSecurityExecBlockCannotClearTheCache (issue 27, N1 review): an exec block with
// args [--clear, --all] wiped the user's cache, and with it their logins.
func TestSecurityExecBlockCannotClearTheCache(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	c := &Command{}
	fs := pflag.NewFlagSet("exec-cache", pflag.ContinueOnError)
	c.AddFlags(fs)
	dir := filepath.Join(t.TempDir(), "cache")
	if err := fs.Parse([]string{"--cache-dir", dir, "--clear", "--all"}); err != nil {
		t.Fatal(err)
	}
	err := c.Run(t.Context(), fs.Args(), Process{Environ: []string{execInfoEnv(t, wire.V1, nil, nil)}, Stdout: &out, Stderr: &errOut})
	var usage *UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--clear is for you to run, not for an exec block") || out.Len() != 0 {
		t.Fatalf("--clear --all as a plugin: %q, %v", out.String(), err)
	}
}

// The default cache directory comes from the client's environment, not from the exec
// block's HOME, XDG_CACHE_HOME or KUBECACHEDIR.
func TestSecurityCacheDirectoryFromTheClient(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the user cache directory is $XDG_CACHE_HOME on Linux only")
	}
	c := &Command{}
	client := Caller{Environ: []string{"HOME=/home/me", "XDG_CACHE_HOME=/home/me/.cache"}, Args: []string{"kubectl"}}
	dir, err := c.cacheDir(Process{Environ: []string{"HOME=/repo", "KUBECACHEDIR=/repo/.kube"}, Caller: client})
	if err != nil || dir != "/home/me/.cache/kplug/exec-cache" {
		t.Fatalf("cacheDir = %q, %v; want the client's", dir, err)
	}
}
