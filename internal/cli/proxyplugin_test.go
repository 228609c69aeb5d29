package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHeaderFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	key := write("key", "  s3cret-key\n")
	twoLines := write("two-lines", "s3cret\nX-Injected: 1\n")
	tests := []struct {
		flag, wantName, wantValue, wantErr string
	}{
		{flag: "X-Api-Key=abc", wantName: "X-Api-Key", wantValue: "abc"},
		{flag: "X-Empty=", wantName: "X-Empty", wantValue: ""},
		{flag: "Authorization=Bearer a=b", wantName: "Authorization", wantValue: "Bearer a=b"},
		{flag: "X-Api-Key=@" + key, wantName: "X-Api-Key", wantValue: "s3cret-key"},
		{flag: "X-Api-Key", wantErr: "invalid --header X-Api-Key: want NAME=VALUE or NAME=@FILE, where NAME is a header name"},
		{flag: "=s3cret", wantErr: "invalid --header: want NAME=VALUE or NAME=@FILE, where NAME is a header name"},
		{flag: "X-Api-Key: s3cret", wantErr: "invalid --header: want NAME=VALUE or NAME=@FILE, where NAME is a header name"},
		{flag: "X Api=s3cret", wantErr: "invalid --header: want NAME=VALUE or NAME=@FILE, where NAME is a header name"},
		{flag: "X-Api-Key=@" + filepath.Join(dir, "missing"), wantErr: "--header X-Api-Key=@" + filepath.Join(dir, "missing") + ": open " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{flag: "X-Api-Key=@" + twoLines, wantErr: "--header X-Api-Key: the value holds a control character (a line break?), which a header cannot carry"},
		{flag: "Connection=X-Api-Key", wantErr: "invalid --header Connection: the proxy does not forward that header as set (it is hop-by-hop, or the transport writes it from the request itself), so the API server would not get it, or not the value signed"},
		{flag: "te=gzip", wantErr: "invalid --header te: the proxy does not forward that header as set (it is hop-by-hop, or the transport writes it from the request itself), so the API server would not get it, or not the value signed"},
		{flag: "Host=other", wantErr: "invalid --header Host: the proxy does not forward that header as set (it is hop-by-hop, or the transport writes it from the request itself), so the API server would not get it, or not the value signed"},
		{flag: "X-Api-Key=s3cret\r\nX-Injected: 1", wantErr: "--header X-Api-Key: the value holds a control character (a line break?), which a header cannot carry"},
	}
	for _, tt := range tests {
		name, value, err := headerFlag("--header", tt.flag)
		var gotErr string
		if err != nil {
			gotErr = err.Error()
		}
		if name != tt.wantName || value != tt.wantValue || gotErr != tt.wantErr {
			t.Errorf("headerFlag(%q) = %q, %q, %q\nwant %q, %q, %q", tt.flag, name, value, gotErr, tt.wantName, tt.wantValue, tt.wantErr)
		}
	}
}

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
