package execcache

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/testkit/poll"
)

// CallerOf reads the environment and arguments a process started with, and not a
// process of another user's.
func TestCallerOf(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), "/bin/sh", "-c", "sleep 60; :", "sh", "--kuberc=x") // a shell keeps its arguments, and waits
	cmd.Env = []string{"PATH=/usr/bin:/bin", "KUBERC=/client/kuberc"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitExeced(t, cmd.Process.Pid)
	c := CallerOf(cmd.Process.Pid)
	if !c.Known() || !slices.Equal(c.Environ, cmd.Env) || !slices.Equal(c.Args, []string{"/bin/sh", "-c", "sleep 60; :", "sh", "--kuberc=x"}) || c.kubercFlag() != "x" {
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

// TestSecurityCallerSkipsExecPlugins (issue 27, N1 review): exec-cache wrapping
// exec-cache took the outer one, whose environment holds the exec block's env, for the
// client. A process with KUBERNETES_EXEC_INFO is a plugin; CallerOf goes on to its parent.
func TestSecurityCallerSkipsExecPlugins(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), "sleep", "60")
	cmd.Env = []string{"PATH=/attacker/bin", "KUBERC=off", "KUBERNETES_EXEC_INFO={}"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitExeced(t, cmd.Process.Pid)
	c := CallerOf(cmd.Process.Pid)
	self, err := os.ReadFile("/proc/self/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Known() || slices.Contains(c.Environ, "PATH=/attacker/bin") || !slices.Equal(c.Args, splitNUL(self)) {
		t.Fatalf("CallerOf(a plugin) = %+v, want this test process, its parent", c)
	}
}

// waitExeced waits until pid's new program has its arguments in place. cmd.Start returns
// once execve has replaced the child's memory, which is before the kernel has written the
// new program's arguments and environment into it: until then both read empty.
func waitExeced(t *testing.T, pid int) {
	t.Helper()
	poll.Until(t, "the child's command line", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		return err == nil && len(b) > 0
	})
}

// A process caught between execve and its new program has no arguments and no
// environment yet; it reads as unknown, never as a client with an empty environment. The
// window is short, so the test starts processes until it has read one inside it.
func TestCallerOfNoCommandLine(t *testing.T) {
	inside := 0
	for range 200 {
		cmd := exec.CommandContext(t.Context(), "/bin/true")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := CallerOf(cmd.Process.Pid)
		_ = cmd.Wait()
		if c.Known() && len(c.Args) == 0 {
			t.Fatalf("CallerOf(a process starting a program) = %+v, want unknown", c)
		}
		if c.Err != nil && strings.Contains(c.Err.Error(), "no command line") {
			inside++
		}
	}
	t.Logf("%d of 200 reads fell between execve and the program", inside)
}

// An empty argument is an argument: kubectl --kuberc "" get ns.
func TestSplitNULKeepsEmptyArguments(t *testing.T) {
	if got := splitNUL([]byte("kubectl\x00--kuberc\x00\x00get\x00")); !slices.Equal(got, []string{"kubectl", "--kuberc", "", "get"}) {
		t.Fatalf("splitNUL = %q", got)
	}
	if c := (Caller{Args: []string{"kubectl", "--kuberc", "", "get", "ns"}}); c.kubercFlag() != "" {
		t.Fatalf("kubercFlag = %q, want the empty value", c.kubercFlag())
	}
}
