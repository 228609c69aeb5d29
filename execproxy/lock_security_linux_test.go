//go:build linux

package execproxy_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/internal/testkit/localuser"
)

// Issue 12 suspicion (removeStaleSockets): a live proxy's socket was removed when a
// connection to it failed for any reason, such as a full backlog, not only when refused.
func TestSecurityBusyLiveSocketIsKept(t *testing.T) {
	dir, err := os.MkdirTemp("", "kp") // short: socket paths are limited to ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sockets := filepath.Join(dir, "proxy")
	if err := os.Mkdir(sockets, 0o700); err != nil {
		t.Fatal(err)
	}
	// A live proxy that is slow to accept: backlog 0, one connection already waiting, so
	// that Linux answers the next connect with EAGAIN.
	busy := filepath.Join(sockets, "proxy-busy.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: busy}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	for {
		c, err := net.Dial("unix", busy)
		if err != nil {
			if !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("filling the backlog: %v", err)
			}
			break
		}
		defer c.Close()
	}
	serve(t, upstream(t), func(o *server.Options) { o.SocketDir = sockets })
	if _, err := os.Lstat(busy); err != nil {
		t.Errorf("a busy live socket was removed as stale: %v", err)
	}
}

// Issue 12 finding 1: with XDG_RUNTIME_DIR unset, the client used $TMPDIR/kplug-<uid>
// whoever owned it. Here another local user created it first, with a FIFO named like an
// old lock file: the client must refuse, clearly, without writing in it or blocking. The
// owner is what it must check: a directory of mode 755 passes any check of the mode, and
// a client running as root could write in it all the same.
func TestSecurityRuntimeDirectoryOfAnotherUser(t *testing.T) {
	attacker := localuser.New(t)
	for _, tt := range []struct {
		mode string
		perm os.FileMode
	}{{"777", 0o777}, {"755", 0o755}} {
		t.Run(tt.mode, func(t *testing.T) {
			shared, err := os.MkdirTemp("", "kplug-shared-") // a /tmp of its own: sticky, anyone may create in it
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(shared)
			if err := os.Chmod(shared, 0o1777); err != nil {
				t.Fatal(err)
			}
			t.Setenv("TMPDIR", shared)
			t.Setenv("XDG_RUNTIME_DIR", "")
			dir := execproxy.RuntimeDir("")
			fifo := filepath.Join(dir, "client-0000000000000000.lock")
			attacker.Sh(t, "mkdir -m "+tt.mode+" '"+dir+"' && mkfifo '"+fifo+"' && touch -d 2000-01-01 '"+fifo+"'")

			err = newLockWithin(t, dir, fifo)
			want := dir + " belongs to uid " + strconv.Itoa(attacker.UID) + ", not to this user"
			if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "exec proxy: runtime directory: ") {
				t.Errorf("NewLock in %s's directory: %v, want a refusal saying %q", attacker, err, want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("the client wrote in another user's directory: %v", entries)
			}
			if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != tt.perm {
				t.Errorf("the client changed the mode of another user's directory: %v, %v; want %v", info.Mode().Perm(), err, tt.perm)
			}
		})
	}
}
