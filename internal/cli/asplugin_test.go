package cli

import (
	"strings"
	"testing"

	"github.com/kplug/kplug/execcred/wire"
)

// TestSecurityCommandsThatRunPluginsRefuseToBeExecPlugins (issue 27, N1 review): with
// kplug on a kuberc allowlist, an exec block ran `kplug run -- anything`, or `kplug
// credential` with a kubeconfig, kuberc and environment of its choosing. Run by a client
// (KUBERNETES_EXEC_INFO set), only the commands made to be exec plugins run.
func TestSecurityCommandsThatRunPluginsRefuseToBeExecPlugins(t *testing.T) {
	t.Setenv(wire.InfoEnv, `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}`)
	for _, args := range [][]string{
		{"run", "--kubeconfig", "k", "--", "/bin/sh", "-c", "touch /tmp/x"},
		{"credential", "--kubeconfig", "k"},
		{"request", "--kubeconfig", "k", "/api"},
		{"image-credential", "get", "r.example/a:b", "--config", "c", "--bin-dir", "b"},
		{"image-credential", "docker-helper", "get"},
		{"peerproxy"},
		{"signature-proxy"},
	} {
		code, out, errOut := run(t, args...)
		want := "does not run as an exec credential plugin (" + wire.InfoEnv + " is set"
		if code != ExitUsage || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("kplug %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, out, errOut, want)
		}
	}
	if code, out, errOut := run(t, "version"); code != ExitOK || out == "" {
		t.Errorf("kplug version as a plugin: exit %d, %q, %q", code, out, errOut)
	}
	// exec-cache gets as far as its own checks.
	if code, _, errOut := run(t, "exec-cache"); code != ExitUsage || !strings.Contains(errOut, "no plugin to run") {
		t.Errorf("kplug exec-cache as a plugin: exit %d, %q", code, errOut)
	}
}
