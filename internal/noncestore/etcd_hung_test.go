//go:build unix

package noncestore

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startEtcdCluster runs a cluster of n members of the pinned etcd on loopback, as
// startEtcd runs one, and returns their client URLs and processes.
func startEtcdCluster(t *testing.T, n int) ([]string, []*os.Process) {
	t.Helper()
	bin, _ := filepath.Abs(filepath.Join("..", "..", "_output", "bin", "etcd"))
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("KPLUG_E2E_REQUIRED") != "" {
			t.Fatalf("etcd is missing (%v): run make tools", err)
		}
		t.Skipf("etcd is missing (%v): run make tools", err)
	}
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	clients, peers, cluster := make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		clients[i], peers[i] = fmt.Sprintf("http://127.0.0.1:%d", port()), fmt.Sprintf("http://127.0.0.1:%d", port())
		cluster[i] = fmt.Sprintf("m%d=%s", i, peers[i])
	}
	procs := make([]*os.Process, n)
	for i := range n {
		cmd := exec.Command(bin, "--name", fmt.Sprintf("m%d", i), "--data-dir", t.TempDir(), "--listen-client-urls", clients[i], "--advertise-client-urls", clients[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i], "--initial-cluster", strings.Join(cluster, ","), "--log-level", "error")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd.Process
		t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	return clients, procs
}

// TestEtcdPassesOverAHungMember (issue 33 review 2, E1): the store moved to the next
// endpoint only when one refused connections. A member that hangs (stopped, or its
// machine gone: connections are accepted or time out) took every Consume to its deadline
// and was never left, so one hung member of three refused every signed request that
// records a nonce (503), for as long as it hung, while etcd's own client carried on
// with the other two. A hung member may cost a call, not all of them.
func TestEtcdPassesOverAHungMember(t *testing.T) {
	endpoints, procs := startEtcdCluster(t, 3)
	e, err := DialEtcd(t.Context(), endpoints, "", 2*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	consume := func(nonce string) error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		ok, reason, err := e.Consume(ctx, "k", nonce, time.Now().Add(time.Minute))
		if err == nil && !ok {
			t.Fatalf("nonce %s refused: %s", nonce, reason)
		}
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); consume(fmt.Sprint("warm-", time.Now().UnixNano())) != nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the etcd cluster did not come up")
		}
	}
	hung := e.current.Load() // the member the store speaks to
	if err := procs[hung].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var errs []error
	for i := range 3 {
		if err := consume(fmt.Sprint("after-", i)); err != nil {
			errs = append(errs, err)
			continue
		}
		return
	}
	t.Errorf("with member %d of 3 hung, every Consume failed: %v", hung, errs)
}
