//go:build unix

package execproxy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/plugin"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

// reportLockFDs is the fake plugin behaviour "lock-fds" (internal/exectest): an exec plugin
// that answers with a token saying how many descriptors of its client's lock file it
// inherited.
func reportLockFDs() int {
	info, err := plugin.LoadInfo(os.Getenv(execcred.InfoEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	n, err := lockDescriptors(info.LockFilePath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf(`{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"token":"lock-fds-%d"}}`, n)
	return 0
}

// lockDescriptors counts this process's descriptors that refer to the file at path.
func lockDescriptors(path string) (int, error) {
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/dev/fd")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		fd, _ := strconv.Atoi(e.Name())
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			n++
		}
	}
	return n, nil
}

// waitDone waits for a proxy started by serve to return.
func (r *running) waitDone(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for serve's cleanup
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(within):
		t.Fatal("the proxy outlived its client")
	}
}

// Issue 12 finding 13: the proxy re-created a lock file its client had removed.
func TestSecurityProxyLeavesNoLockFileBehind(t *testing.T) {
	up := upstream(t)
	r := serve(t, up, nil)
	path := r.lock.Path
	// The client uses the proxy first. Closing the lock at once raced with the proxy's
	// first look at it: a look between the unlock and the removal found the lock free
	// before the file was gone, and the test passed even with a proxy that re-creates it.
	c, _ := client(t, r, up.URL)
	if got := get(t, c, up.URL+"/version"); !strings.HasPrefix(got, "GET /version") {
		t.Fatalf("through the proxy: %q", got)
	}
	c.CloseIdleConnections()
	if err := r.lock.Close(); err != nil { // a normal exit: unlock, then remove the file
		t.Fatal(err)
	}
	r.waitDone(t, 5*time.Second)
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the client's lock file is back after the proxy exited: %v", err)
	}
}

// Issue 12 finding 13: a lock file unlinked while its client lived made the proxy take
// the lock on a new file and exit under the running client.
func TestSecurityProxyOutlivesUnlinkOfALiveLock(t *testing.T) {
	up := upstream(t)
	r := serve(t, up, nil)
	if err := os.Remove(r.lock.Path); err != nil { // the client lives on, holding its lock
		t.Fatal(err)
	}
	// The proxy looks at the lock every 200 ms: a few looks must leave it serving.
	select {
	case err := <-r.done:
		r.done <- err
		t.Fatalf("the proxy exited while its client held the lock: %v", err)
	case <-time.After(time.Second):
	}
	c, _ := client(t, r, up.URL)
	if got := get(t, c, up.URL+"/version"); !strings.HasPrefix(got, "GET /version") {
		t.Errorf("through the proxy after the unlink: %q", got)
	}
	c.CloseIdleConnections()
	if _, err := os.Lstat(r.lock.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the proxy re-created the lock file: %v", err)
	}
	_ = r.lock.Close() // the client goes: the proxy, watching the unlinked file, follows
	r.waitDone(t, 5*time.Second)
}

// Issue 12 finding 14: a spec.lockFilePath that is missing, a link, a FIFO or a directory,
// or that nobody holds, was accepted.
func TestSecurityLockFilePathIsChecked(t *testing.T) {
	dir := t.TempDir()
	held, err := execproxy.NewLock(filepath.Join(dir, "client"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	link := filepath.Join(dir, "link.lock")
	fifo := filepath.Join(dir, "fifo.lock")
	unheld := filepath.Join(dir, "unheld.lock")
	if err := os.Symlink(held.Path, link); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unheld, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{filepath.Join(dir, "absent.lock"), "exec proxy: spec.lockFilePath: open " + filepath.Join(dir, "absent.lock") + ": no such file or directory; the client must create its lock file"},
		{link, "exec proxy: spec.lockFilePath: " + link + " is a symbolic link, which is not followed"},
		{fifo, "exec proxy: spec.lockFilePath: " + fifo + " is not a regular file"},
		{dir, "exec proxy: spec.lockFilePath: " + dir + " is not a regular file"},
		{unheld, "exec proxy: spec.lockFilePath " + unheld + " is not locked: the client must hold an exclusive flock on it"},
	} {
		done := make(chan error, 1)
		go func() {
			done <- server.Serve(t.Context(), server.Options{
				Upstream: &rest.Config{Host: "https://127.0.0.1:1"}, LockFilePath: tt.path, SocketDir: filepath.Join(dir, "proxy"),
				Ready: func(*execcred.Status) { t.Errorf("the proxy started for %s", tt.path) },
			})
		}()
		select {
		case err := <-done:
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Serve with %s:\n got %v\nwant %s...", tt.path, err, tt.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Serve blocked on %s", tt.path)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "absent.lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Serve created the missing lock file: %v", err)
	}
}

// Issue 12 finding 15: a client that leaks its lock's descriptor into the plugin (no
// close-on-exec) kept the proxy alive forever after the client died.
func TestSecurityProxyClosesAnInheritedLockDescriptor(t *testing.T) {
	dir, err := os.MkdirTemp("", "kp") // short: socket paths are limited to ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "leaky.lock")
	lock, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]any{
		"kind": execcred.Kind, "apiVersion": execcred.V1,
		"spec": map[string]any{"lockFilePath": path, "cluster": map[string]any{"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": true}},
	})
	fake := exectest.New(t).Behaviour("self-proxy")
	plugin := exec.Command(fake.Path())
	plugin.Env = append(append(os.Environ(), fake.Env()...), "SOCKET_DIR="+filepath.Join(dir, "proxy"), execcred.InfoEnv+"="+string(info))
	plugin.ExtraFiles = []*os.File{lock} // the leak: the plugin gets the lock's open file, without close-on-exec
	stdout, err := plugin.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := plugin.Start(); err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(stdout) // until the proxy closes stdout: it serves
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = plugin.Wait(); close(exited) }()
	defer func() {
		_ = plugin.Process.Kill()
		<-exited
	}()
	if !strings.Contains(string(answer), "proxyConfig") {
		t.Fatalf("the plugin did not answer with a proxy: %q", answer)
	}
	_ = lock.Close() // the client dies; its lock is released only when no process keeps the open file
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("the proxy: %v", waitErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy outlived its client: it kept the lock's descriptor it inherited")
	}
}

// Issue 12 finding 15: kplug's own client must not leak its lock into the plugin.
func TestSecurityClientDoesNotLeakItsLock(t *testing.T) {
	fake := exectest.New(t).Behaviour("lock-fds")
	s, err := execproxy.Connect(t.Context(), &rest.Config{Host: "https://127.0.0.1:1", ExecProvider: execConfig(fake)},
		execproxy.Options{RuntimeDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Credential().Token; got != "lock-fds-0" {
		t.Errorf("the plugin inherited descriptors of its client's lock: %s", got)
	}
}

// newLockWithin takes a lock in dir and releases it, failing t if NewLock blocks on fifo
// (which it then unblocks, so that no goroutine is left behind); it returns NewLock's or
// Close's error.
func newLockWithin(t *testing.T, dir, fifo string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		l, err := execproxy.NewLock(dir)
		if err == nil {
			err = l.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil { // let the blocked open return
			defer w.Close()
		}
		t.Fatalf("NewLock blocked on the FIFO %s", fifo)
		return nil
	}
}

// Issue 12 finding 1: a FIFO named like an old lock file made every client hang.
func TestSecurityStaleLockFIFODoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "client-0000000000000000.lock")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(fifo, old, old); err != nil {
		t.Fatal(err)
	}
	if err := newLockWithin(t, dir, fifo); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(fifo); err != nil {
		t.Errorf("the FIFO, not a lock file, was removed: %v", err)
	}
}

// Issue 12 suspicion (upstream timeouts): an API server address that accepts TCP but never
// completes the TLS handshake held requests through the proxy until the client gave up.
func TestSecurityUpstreamHandshakeTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	silent := "https://" + ln.Addr().String()
	r := serve(t, upstream(t), func(o *server.Options) { o.Upstream = &rest.Config{Host: silent} })
	c, _ := client(t, r, silent)
	c.Timeout = 2 * time.Minute // longer than any timeout the proxy should have
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, silent+"/version", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("the request was held until the client gave up: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "TLS handshake timeout") {
		t.Errorf("got %d %s, want 502 with a TLS handshake timeout", resp.StatusCode, body)
	}
}
