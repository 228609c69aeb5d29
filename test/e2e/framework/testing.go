package framework

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// RequireEnv names the variable that, when non-empty (make test sets it), turns a missing
// control plane into a test failure instead of a skip.
const RequireEnv = "KPLUG_E2E_REQUIRED"

// StartForTest starts a control plane for t and stops it when the test ends, printing the
// process logs first if the test failed. Without the binaries it skips the test and says
// why, unless KPLUG_E2E_REQUIRED is set.
func StartForTest(t testing.TB, o Options) *ControlPlane {
	t.Helper()
	if o.BinDir == "" {
		dir, err := FindBinDir()
		if err != nil {
			if os.Getenv(RequireEnv) != "" {
				t.Fatal(err)
			}
			t.Skipf("skipping end-to-end test: %v", err)
		}
		o.BinDir = dir
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	cp, err := Start(context.Background(), o)
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(cp.Logs(60))
		}
		cp.Stop()
	})
	return cp
}

// ToolForTest returns the path of the tool name (see FindTool). Without it, it skips the
// test and says why, unless KPLUG_E2E_REQUIRED is set.
func ToolForTest(t testing.TB, name string) string {
	t.Helper()
	path, err := FindTool(name)
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatal(err)
		}
		t.Skipf("skipping end-to-end test: %v", err)
	}
	return path
}

// StartNodeForTest starts a node (ControlPlane.StartNode) for t, printing its logs if the
// test failed; ControlPlane.Stop stops it. Where a node cannot run (not root, or the
// binaries missing) it skips the test and says why, unless KPLUG_E2E_REQUIRED is set.
func StartNodeForTest(t testing.TB, cp *ControlPlane, o NodeOptions) *Node {
	t.Helper()
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	n, err := cp.StartNode(context.Background(), o)
	if err != nil {
		if errors.Is(err, errNodeUnavailable) && os.Getenv(RequireEnv) == "" {
			t.Skipf("skipping end-to-end test: %v", err)
		}
		t.Fatalf("starting a node: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(n.Logs(60))
		}
	})
	return n
}

// StartEtcdForTest starts one etcd member on loopback, alone, for a test (or benchmark) of
// something that keeps its own state in etcd, and stops it when the test ends, printing
// its log first if the test failed. It returns the client URL. Like the control plane's,
// it does not fsync: figures measured against it leave out the disk. Without the binaries
// it skips the test, unless KPLUG_E2E_REQUIRED is set.
func StartEtcdForTest(t testing.TB) string {
	t.Helper()
	dir, err := FindBinDir()
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatal(err)
		}
		t.Skipf("skipping: %v", err)
	}
	e, err := startEtcd(context.Background(), dir, t.TempDir())
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(e.proc.tail(60))
		}
		e.proc.stop(5 * time.Second)
	})
	return e.clientURL
}
