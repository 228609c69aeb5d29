package execcache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/kuberc"
	"github.com/kplug/kplug/execcred/wire"
)

// TestRunAppliesThePolicy: the client checked its credential plugin policy against the
// wrapper, not the wrapped plugin, so the wrapper applies it to the wrapped plugin: a
// denied one neither runs nor has the answer it produced earlier served from the cache.
func TestRunAppliesThePolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	info := execInfoEnv(t, execcred.V1, nil, nil)
	cached := answer(execcred.V1, "none", 1, "")
	allow := kuberc.Policy{Type: kuberc.Allowlist, Allowlist: []kuberc.AllowlistEntry{{Command: "kplug"}, {Command: os.Args[0]}}}
	deny := kuberc.Policy{Type: kuberc.Allowlist, Allowlist: []kuberc.AllowlistEntry{{Command: "kplug"}}}

	h.opts.Policies = []FilePolicy{{Policy: allow}}
	if out, err := h.call(kubectlA, info); err != nil || out != cached {
		t.Fatalf("allowed: %q, %v", out, err)
	}
	// Policies add up: one that denies is enough, wherever it is in the list.
	h.opts.Policies = []FilePolicy{{Policy: allow, File: "/tmp/allow"}, {Policy: deny, File: "/home/me/.kube/kuberc"}}
	for _, client := range []Client{kubectlB, kubectlA, {}} {
		out, err := h.call(client, info)
		var pe *PolicyError
		var denied *kuberc.DeniedError
		want := `exec-cache: the credential plugin policy in /home/me/.kube/kuberc (Allowlist [kplug]) does not allow the wrapped plugin: plugin path "` +
			os.Args[0] + `" is not permitted by the credential plugin allowlist`
		if out != "" || !errors.As(err, &pe) || !errors.As(err, &denied) || err.Error() != want {
			t.Errorf("denied, client %v: %q, %v\nwant no output and %s", client, out, err, want)
		}
	}
	if n := h.plugin.Runs(); n != 1 {
		t.Errorf("the plugin ran %d times, want 1", n)
	}
	// Allowed again, the entry is still there for a client it was not given to.
	h.opts.Policies = []FilePolicy{{Policy: allow}}
	if out, err := h.call(kubectlB, info); err != nil || out != cached || h.plugin.Runs() != 1 {
		t.Errorf("allowed again: %q, %v, %d runs; want the cached answer", out, err, h.plugin.Runs())
	}
}

// TestCommandPolicyFromTheAccount: the exec block that runs exec-cache comes from the
// kubeconfig the policy guards against, and can pass --kuberc and set KUBERC,
// KUBECTL_KUBERC and HOME. None of them removes the policy in the account's own
// ~/.kube/kuberc (its home from the user database): the wrapped plugin neither runs nor
// is served.
func TestCommandPolicyFromTheAccount(t *testing.T) {
	t.Parallel()
	plugin := fakePlugin(t)
	account := t.TempDir()
	if err := os.MkdirAll(filepath.Join(account, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	policy := "apiVersion: kubectl.config.k8s.io/v1beta1\nkind: Preference\ncredentialPluginPolicy: Allowlist\ncredentialPluginAllowlist:\n- command: kplug\n"
	if err := os.WriteFile(filepath.Join(account, ".kube", "kuberc"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	for _, attack := range []struct {
		name  string
		flags []string
		env   []string
	}{
		{"nothing", nil, nil},
		{"--kuberc naming an empty file", []string{"--kuberc", empty}, nil},
		{"KUBERC=off", nil, []string{"KUBERC=off"}},
		{"KUBERC naming an empty file", nil, []string{"KUBERC=" + empty}},
		{"KUBECTL_KUBERC=false", nil, []string{"KUBECTL_KUBERC=false"}},
		{"HOME elsewhere", nil, []string{"HOME=" + elsewhere}},
	} {
		var out, errOut bytes.Buffer
		c := &Command{}
		fs := pflag.NewFlagSet("exec-cache", pflag.ContinueOnError)
		c.AddFlags(fs)
		args := append(append(append([]string{"--cache-dir", filepath.Join(t.TempDir(), "cache")}, attack.flags...), "--", os.Args[0]), "-test.run=^$")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		env := append(append(plugin.Env(), execInfoEnv(t, wire.V1, nil, nil), "HOME="+account), attack.env...)
		err := c.Run(t.Context(), fs.Args(), Process{Environ: env, Stdout: &out, Stderr: &errOut, AccountHome: account})
		var pe *PolicyError
		if !errors.As(err, &pe) || pe.File != filepath.Join(account, ".kube", "kuberc") || out.Len() != 0 {
			t.Errorf("%s: %q, %v; want the account's policy to deny", attack.name, out.String(), err)
		}
	}
	if n := plugin.Runs(); n != 0 {
		t.Errorf("the wrapped plugin ran %d times", n)
	}
}
