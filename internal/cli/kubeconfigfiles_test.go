package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// TestKubeconfigMissing covers issue 32 item 5: `KUBECONFIG=/nope kplug credential`
// printed client-go's "no configuration has been provided, try setting KUBERNETES_MASTER
// environment variable", which names no file and suggests a variable kplug never reads.
// Every command that loads a kubeconfig now names what is missing and where it looked.
// Not parallel: it sets $KUBECONFIG and client-go's home kubeconfig path.
func TestKubeconfigMissing(t *testing.T) {
	dir := t.TempDir()
	missing, missing2 := filepath.Join(dir, "nope"), filepath.Join(dir, "nope2")
	home := filepath.Join(dir, "home", ".kube", "config")
	saved := clientcmd.RecommendedHomeFile
	clientcmd.RecommendedHomeFile = home
	t.Cleanup(func() { clientcmd.RecommendedHomeFile = saved })
	empty := filepath.Join(dir, "empty.yaml")
	noCurrent := filepath.Join(dir, "no-current.yaml")
	writeFile(t, empty, "")
	writeFile(t, noCurrent, `apiVersion: v1
kind: Config
clusters:
- {name: c, cluster: {server: "https://127.0.0.1:1"}}
- {name: serverless, cluster: {certificate-authority-data: eA==}}
users:
- {name: u, user: {token: x}}
contexts:
- {name: a, context: {cluster: c, user: u}}
- {name: b, context: {cluster: gone, user: u}}
- {name: d, context: {cluster: serverless, user: u}}
`)
	tests := []struct {
		env        string
		args       []string
		wantStderr string
	}{
		{missing, []string{"credential"},
			"$KUBECONFIG names " + missing + ", which does not exist; set KUBECONFIG or --kubeconfig to a kubeconfig file"},
		{missing + string(filepath.ListSeparator) + missing2, []string{"request", "/api"},
			"$KUBECONFIG names " + missing + " and " + missing2 + ", none of which exists; set KUBECONFIG or --kubeconfig to a kubeconfig file"},
		{"", []string{"run", "--", "kubectl", "get", "pods"},
			home + " does not exist and $KUBECONFIG is not set; give --kubeconfig, or set KUBECONFIG, to a kubeconfig file"},
		{missing, []string{"credential", "--kubeconfig", missing2},
			"--kubeconfig " + missing2 + " does not exist"},
		{"", []string{"credential", "--kubeconfig", empty},
			"no current-context in " + empty + "; give --context"},
		{missing + string(filepath.ListSeparator) + noCurrent, []string{"credential"},
			"no current-context in " + noCurrent + "; give --context"},
		{empty + string(filepath.ListSeparator) + noCurrent, []string{"credential", "--context", "z"},
			`no context "z" in ` + empty + " or " + noCurrent + `; contexts there: "a", "b", "d"`},
		{"", []string{"credential", "--kubeconfig", empty, "--context", "z"},
			`no context "z" in ` + empty + ": there are no contexts"},
		{noCurrent, []string{"credential", "--context", "b"},
			`context "b" names cluster "gone", which is not in ` + noCurrent},
		{noCurrent, []string{"request", "--context", "d", "/api"},
			`cluster "serverless" of context "d" has no server in ` + noCurrent},
	}
	for _, tt := range tests {
		t.Setenv("KUBECONFIG", tt.env)
		code, out, errOut := run(t, tt.args...)
		want := "Error: loading kubeconfig: " + tt.wantStderr + "\n"
		if code != ExitUsage || out != "" || errOut != want {
			t.Errorf("KUBECONFIG=%s kplug %s: code %d, stdout %q\nstderr %q\nwant   %q", tt.env, strings.Join(tt.args, " "), code, out, errOut, want)
		}
		if strings.Contains(errOut, "KUBERNETES_MASTER") {
			t.Errorf("KUBECONFIG=%s kplug %s suggests KUBERNETES_MASTER", tt.env, strings.Join(tt.args, " "))
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
