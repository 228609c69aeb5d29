package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRunRefusesClientKubeconfig covers issue 32 item 7: `kplug run -- kubectl get pods
// --kubeconfig X` used kplug's default kubeconfig, not X. The client's own --kubeconfig
// and --context are refused, before any kubeconfig is read, with the line that works.
func TestRunRefusesClientKubeconfig(t *testing.T) {
	t.Parallel()
	const why = " goes to kubectl, which kplug run gives a kubeconfig of its own (through the exec proxy); give it to kplug run: "
	tests := []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"run", "--", "kubectl", "get", "pods", "--kubeconfig", "X"},
			"--kubeconfig X after --" + why + "kplug run --kubeconfig X -- kubectl get pods"},
		{[]string{"run", "--", "kubectl", "get", "pods", "--kubeconfig=X"},
			"--kubeconfig=X after --" + why + "kplug run --kubeconfig=X -- kubectl get pods"},
		{[]string{"-v", "4", "run", "--plugin-timeout", "5s", "--", "kubectl", "--context", "prod", "get", "pods", "-l", "app in (a,b)"},
			"--context prod after --" + why + "kplug -v 4 run --plugin-timeout 5s --context prod -- kubectl get pods -l 'app in (a,b)'"},
		{[]string{"run", "--", "kubectl", "--context=prod", "exec", "p", "--kubeconfig", "K", "--", "kubectl", "--context", "in-pod"},
			"--context=prod --kubeconfig K after --" + why + "kplug run --context=prod --kubeconfig K -- kubectl exec p -- kubectl --context in-pod"},
	}
	for _, tt := range tests {
		code, out, errOut := run(t, tt.args...)
		want := "Error: " + tt.wantStderr + "\n"
		if code != ExitUsage || out != "" || errOut != want {
			t.Errorf("kplug %s: code %d, stdout %q\nstderr %q\nwant   %q", strings.Join(tt.args, " "), code, out, errOut, want)
		}
	}
	// The flags of a command the client runs after its own --, and a shell's argument,
	// are not the client's: kplug goes on to read its kubeconfig.
	missing := filepath.Join(t.TempDir(), "missing")
	for _, args := range [][]string{
		{"run", "--kubeconfig", missing, "--", "kubectl", "exec", "p", "--", "kubectl", "--context", "in-pod"},
		{"run", "--kubeconfig", missing, "kubectl", "exec", "p", "--", "kubectl", "--context", "in-pod"},
		{"run", "--kubeconfig", missing, "--", "sh", "-c", "kubectl --context x get pods"},
	} {
		code, _, errOut := run(t, args...)
		if want := "Error: loading kubeconfig: --kubeconfig " + missing + " does not exist\n"; code != ExitUsage || errOut != want {
			t.Errorf("kplug %s: code %d\nstderr %q\nwant   %q", strings.Join(args, " "), code, errOut, want)
		}
	}
}

func TestRunUsageLine(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, "run", "--help")
	if want := "\nUsage:\n  kplug run [flags] -- COMMAND [ARGS...]\n\n"; code != ExitOK || !strings.Contains(out, want) {
		t.Errorf("kplug run --help: code %d, usage not %q:\n%s", code, want, out)
	}
}
