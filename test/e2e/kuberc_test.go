package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplug/kplug/test/e2e/framework"
)

// TestExecCacheKubercPolicy: real kubectl checks its kuberc credential plugin policy
// against the command of the exec block, which with exec-cache is kplug, not the plugin
// kplug wraps. `kplug exec-cache` applies the same kuberc (KUBERC, which kubectl's
// plugins inherit) to the wrapped plugin: with an allowlist that names kplug but not the
// plugin, kubectl fails, the plugin never runs, and the answer it produced earlier is not
// served from the cache; with the plugin allowed, kubectl works from the cache again.
// kplug's own runtime gives client-go's words for the same denial.
func TestExecCacheKubercPolicy(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	s := newExecCacheSetup(t, cp)
	writeBytes(t, s.tokenFile, []byte(cp.TokenUser.Token))
	dir := t.TempDir()
	kuberc := func(name string, commands ...string) string {
		doc := "apiVersion: kubectl.config.k8s.io/v1beta1\nkind: Preference\ncredentialPluginPolicy: Allowlist\ncredentialPluginAllowlist:\n"
		for _, c := range commands {
			doc += fmt.Sprintf("- command: %q\n", c)
		}
		path := filepath.Join(dir, name)
		writeBytes(t, path, []byte(doc))
		return path
	}
	allow, deny := kuberc("allow", s.kplug, s.plugin), kuberc("deny", s.kplug)
	whoami := func(kuberc, context string) (string, string, error) {
		t.Helper()
		return runEnv(t, append(os.Environ(), "KUBERC="+kuberc), s.kubectl, "--kubeconfig", s.kubeconfig, "--context", context,
			"auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	}

	// Allowed: the plugin runs once, and its answer is cached.
	if out, errOut, err := whoami(allow, "cached"); err != nil || out != cp.TokenUser.Name {
		t.Fatalf("allowed: %q, %v\n%s", out, err, errOut)
	}
	if n := s.runs(); n != 1 {
		t.Fatalf("%d plugin runs, want 1", n)
	}

	// Denied: kubectl allows kplug, kplug refuses the wrapped plugin, says why on stderr
	// (which kubectl shows), and serves nothing.
	notPermitted := fmt.Sprintf("plugin path %q is not permitted by the credential plugin allowlist", s.plugin)
	out, errOut, err := whoami(deny, "cached")
	wantMsg := "exec-cache: the credential plugin policy in " + deny + " (Allowlist [" + s.kplug + "]) does not allow the wrapped plugin: " + notPermitted
	if err == nil || out != "" || !strings.Contains(errOut, wantMsg) {
		t.Fatalf("denied: kubectl %q, %v\nstderr %s\nwant it to show %s", out, err, errOut, wantMsg)
	}
	t.Logf("kubectl, denied through exec-cache: %s", strings.TrimSpace(errOut))
	if n := s.runs(); n != 1 {
		t.Fatalf("the denied plugin ran: %d runs, want 1", n)
	}

	// The same policy on the plugin itself: kubectl's (client-go's) message is the one
	// exec-cache and kplug's runtime give.
	_, errOut, err = whoami(deny, "direct")
	if err == nil || !strings.Contains(errOut, notPermitted) {
		t.Fatalf("kubectl without exec-cache: %v\n%s\nwant %s", err, errOut, notPermitted)
	}
	_, errOut, err = runEnv(t, append(os.Environ(), "KUBERC="+deny), s.kplug, "credential", "--kubeconfig", s.kubeconfig, "--context", "direct")
	if code := exitCode(err); code != 1 || errOut != "Error: execcred: "+notPermitted+"\n" {
		t.Fatalf("kplug credential: exit %d\n%s\nwant Error: execcred: %s", code, errOut, notPermitted)
	}
	if n := s.runs(); n != 1 {
		t.Fatalf("the denied plugin ran: %d runs, want 1", n)
	}

	// Allowed again: served from the cache.
	if out, errOut, err := whoami(allow, "cached"); err != nil || out != cp.TokenUser.Name || s.runs() != 1 {
		t.Fatalf("allowed again: %q, %v, %d runs\n%s", out, err, s.runs(), errOut)
	}
}
