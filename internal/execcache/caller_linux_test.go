package execcache

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

// CallerOf reads the environment and arguments a process started with, and not a
// process of another user's.
func TestCallerOf(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), "sleep", "60", "--kuberc=x")
	cmd.Env = []string{"PATH=/client/bin", "KUBERC=/client/kuberc"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	c := CallerOf(cmd.Process.Pid)
	if !c.Known() || !slices.Equal(c.Environ, cmd.Env) || !slices.Equal(c.Args, []string{"sleep", "60", "--kuberc=x"}) || c.kubercFlag() != "x" {
		t.Fatalf("CallerOf = %+v", c)
	}
	if c := CallerOf(0); c.Known() || c.Err == nil {
		t.Errorf("CallerOf(0) = %+v, want unknown", c)
	}
	if os.Geteuid() != 0 {
		if c := CallerOf(1); c.Known() {
			t.Errorf("CallerOf(1) = %+v: init runs as root, not as this user", c)
		}
	}
}

func TestCallerKubercFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"kubectl", "get", "ns"}, ""},
		{[]string{"kubectl", "--kuberc", "a", "get"}, "a"},
		{[]string{"kubectl", "--kuberc=a", "--kuberc", "b"}, "b"},
		{[]string{"kubectl", "exec", "pod", "--", "sh", "--kuberc", "a"}, ""},
		{[]string{"--kuberc=a"}, ""}, // the program's own name
	} {
		if got := (Caller{Args: tt.args}).kubercFlag(); got != tt.want {
			t.Errorf("%q: %q, want %q", tt.args, got, tt.want)
		}
	}
}
