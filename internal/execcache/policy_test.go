package execcache

import (
	"errors"
	"os"
	"testing"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/kuberc"
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

	h.opts.Policy = allow
	if out, err := h.call(kubectlA, info); err != nil || out != cached {
		t.Fatalf("allowed: %q, %v", out, err)
	}
	h.opts.Policy, h.opts.PolicyFile = deny, "/home/me/.kube/kuberc"
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
	h.opts.Policy = allow
	if out, err := h.call(kubectlB, info); err != nil || out != cached || h.plugin.Runs() != 1 {
		t.Errorf("allowed again: %q, %v, %d runs; want the cached answer", out, err, h.plugin.Runs())
	}
}
