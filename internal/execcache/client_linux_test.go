package execcache

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestStatStartTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		stat, want, wantErr string
	}{
		{"4242 (kubectl) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 0 0\n", "123456", ""},
		{"4242 (a) (b ) R) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987 0 0\n", "987", ""},
		{"4242 kubectl S 1", "", "execcache: malformed /proc stat: no command name"},
		{"4242 (kubectl) S 1 2 3", "", "execcache: malformed /proc stat: 4 fields after the command name"},
		{"4242 (kubectl) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 x 0 0\n", "", `execcache: malformed /proc stat start time: strconv.ParseUint: parsing "x": invalid syntax`},
	}
	for _, tt := range tests {
		got, err := statStartTime(tt.stat)
		if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
			t.Errorf("%q: %q, %v; want %q, %q", tt.stat, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestClientOf: a process and a later one that got the same pid (simulated by comparing
// two processes) differ by start time.
func TestClientOf(t *testing.T) {
	t.Parallel()
	self := ClientOf(os.Getpid())
	if !self.Known() || self.Start == "" || ClientOf(os.Getpid()) != self {
		t.Fatalf("ClientOf(self) = %+v, not stable", self)
	}
	if init := ClientOf(1); !init.Known() {
		t.Errorf("ClientOf(1) = %+v: a client that is a container's init must be known", init)
	}
	for _, pid := range []int{0, -3} {
		if c := ClientOf(pid); c.Known() {
			t.Errorf("ClientOf(%d) = %+v, want unknown", pid, c)
		}
	}
	time.Sleep(30 * time.Millisecond) // start times count in clock ticks (usually 10 ms)
	cmd := exec.Command("sleep", "1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := ClientOf(cmd.Process.Pid)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if child.Start == "" || child.Start == self.Start {
		t.Errorf("child %+v, self %+v: want different start times", child, self)
	}
	// A process that is gone is known by pid alone.
	if c := ClientOf(cmd.Process.Pid); c.Start != "" {
		t.Errorf("exited process: %+v", c)
	}
}
