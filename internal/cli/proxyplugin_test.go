package cli

import (
	"io"
	"strings"
	"testing"
)

// TestDaemonTakesTheLauncherArguments: a daemon started as `proxy-plugin --daemon` applies
// the arguments its launcher writes to its stdin, global flags included.
func TestDaemonTakesTheLauncherArguments(t *testing.T) {
	t.Setenv("KUBERNETES_EXEC_INFO", "")
	var errOut strings.Builder
	g := &globals{io: IO{In: strings.NewReader(`["-v","4","proxy-plugin","--header","X-A=1","--idle-timeout","3s"]`), Out: io.Discard, Err: &errOut}}
	code := execute(t.Context(), newRootCommand(g), []string{"proxy-plugin", "--daemon"}, g.io)
	if g.verbosity != 4 {
		t.Errorf("verbosity %d, want 4 from the launcher's -v 4", g.verbosity)
	}
	if code != ExitFailure || !strings.Contains(errOut.String(), "exec proxy: no lock file") {
		t.Errorf("code %d, stderr %q; want the daemon to get as far as the missing lock file", code, errOut.String())
	}
	g = &globals{io: IO{In: strings.NewReader(`["proxy-plugin","--header","X-A"]`), Out: io.Discard, Err: &errOut}}
	errOut.Reset()
	code = execute(t.Context(), newRootCommand(g), []string{"proxy-plugin", "--daemon"}, g.io)
	if want := "Error: invalid --header X-A: want NAME=VALUE or NAME=@FILE, where NAME is a header name\nRun 'kplug proxy-plugin --help' for usage.\n"; code != ExitUsage || errOut.String() != want {
		t.Errorf("a launcher's bad --header: code %d, stderr %q, want %q", code, errOut.String(), want)
	}
}

// TestProxyPluginWantsClusterInfo: a client that sent a lock file but no spec.cluster is
// told to set provideClusterInfo, and kplug exits 2, since the kubeconfig needs fixing.
func TestProxyPluginWantsClusterInfo(t *testing.T) {
	t.Setenv("KUBERNETES_EXEC_INFO", `{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{"interactive":false,"lockFilePath":"/nonexistent/client.lock"}}`)
	code, out, errOut := run(t, "proxy-plugin", "--header", "X-A=1")
	want := "Error: plugin: the client sent no cluster information; set provideClusterInfo: true in the kubeconfig's exec block\n"
	if code != ExitUsage || out != "" || errOut != want {
		t.Errorf("code %d, stdout %q\nstderr %q\nwant   %q", code, out, errOut, want)
	}
}
