package keys

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/google/go-tpm/tpm2/transport"
	"github.com/kplug/kplug/internal/peercred"
)

// tpmDeviceName is the name of a TPM character device: the kernel's /dev/tpmN, or its
// resource manager /dev/tpmrmN. Any other device (a disk, a tty) is not a TPM, and kplug
// would send it the auth value.
var tpmDeviceName = regexp.MustCompile(`^/dev/tpm(rm)?[0-9]+$`)

// tpmCommandTimeout bounds each command on a TPM socket: a socket that accepts a command
// and never answers is an error, not a hang. A real TPM answers within seconds; swtpm at
// once. A variable for tests.
var tpmCommandTimeout = 30 * time.Second

// openTPMDevice opens a TPM character device, or the server socket of a software TPM
// (swtpm socket --server type=unixio), and returns it with the path for messages. The auth
// value goes to it in the clear, so a socket must be the user's own, in a directory no one
// else can write to, and a device must be named as a TPM (F1 of the issue 30 review).
func openTPMDevice(path string) (transport.TPMCloser, string, error) {
	if path == "" {
		path = DefaultTPMDevice
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && tpmDeviceName.MatchString(path):
		return nil, path, fmt.Errorf("tpm: no TPM at %s: this machine has no TPM 2.0 or its driver is not loaded (ls /dev/tpm*), or give the TPM with device=", path)
	case errors.Is(err, os.ErrNotExist):
		// A path the user gave (device=, $KPLUG_TPM_DEVICE) that is not a TPM device's
		// name: the machine may well have a TPM, so say where the path came from.
		return nil, path, fmt.Errorf("tpm: no TPM at %s: nothing is there; check the device= of the tpm: URI or $%s (a TPM device such as %s, or the socket of a running swtpm)", path, tpmDeviceEnvName, DefaultTPMDevice)
	case err != nil:
		return nil, path, fmt.Errorf("tpm: TPM %s: %w", path, err)
	case fi.Mode()&os.ModeSocket != 0:
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, path, fmt.Errorf("tpm: TPM socket %s: %w", path, err)
		}
		if err := checkTPMSocket(path, real); err != nil {
			return nil, path, err
		}
		return transport.FromReadWriteCloser(&tpmSocket{path: real, shown: path}), path, nil
	case fi.Mode()&os.ModeCharDevice == 0:
		return nil, path, fmt.Errorf("tpm: %s is not a TPM device (a character device such as %s) or a TPM socket", path, DefaultTPMDevice)
	}
	if real, err := filepath.EvalSymlinks(path); err != nil || !tpmDeviceName.MatchString(real) {
		return nil, path, fmt.Errorf("tpm: %s is a character device but not a TPM: want /dev/tpmN or /dev/tpmrmN", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0) //nolint:gosec // a TPM device, checked by name
	switch {
	case errors.Is(err, syscall.EBUSY):
		return nil, path, fmt.Errorf("tpm: TPM %s is busy: another program has it open; use %s, the kernel's resource manager, which programs share", path, DefaultTPMDevice)
	case errors.Is(err, os.ErrPermission):
		return nil, path, fmt.Errorf("tpm: TPM %s: permission denied: add the user to the group that owns it (often tss)", path)
	case err != nil:
		return nil, path, fmt.Errorf("tpm: opening TPM %s: %w", path, err)
	}
	return transport.FromReadWriteCloser(f), path, nil
}

// checkTPMSocket accepts the socket real (path, its links followed) only if this user
// owns it, no one else may write to it, and its directory is this user's or root's and no
// one else may write to it: then no other user can have put it there or listen on it.
func checkTPMSocket(path, real string) error {
	uid := os.Geteuid()
	for _, c := range []struct{ what, name string }{{"socket", real}, {"directory", filepath.Dir(real)}} {
		fi, err := os.Lstat(c.name)
		if err != nil {
			return fmt.Errorf("tpm: TPM socket %s: %w", path, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("tpm: TPM socket %s: cannot read the owner of %s", path, c.name)
		}
		owner := int(st.Uid) == uid || (c.what == "directory" && st.Uid == 0)
		if !owner {
			return fmt.Errorf("tpm: TPM socket %s: its %s %s belongs to uid %d, not to this user (uid %d): kplug sends the key's auth value to the TPM, so it uses only a socket of yours", path, c.what, c.name, st.Uid, uid)
		}
		// swtpm makes its socket 0770; writing to a socket only connects to it, so the
		// group may, but not everyone.
		writable := os.FileMode(0o022)
		if c.what == "socket" {
			writable = 0o002
		}
		if perm := fi.Mode().Perm(); perm&writable != 0 {
			return fmt.Errorf("tpm: TPM socket %s: its %s %s has mode %v: other users can write to it; put the socket in a directory only you can write to (chmod go-w)", path, c.what, c.name, perm)
		}
	}
	return nil
}

// tpmSocket carries TPM commands to a swtpm server socket, as go-tpm's linuxudstpm does (a
// connection per command), with a deadline on each command.
type tpmSocket struct {
	path, shown string
	conn        net.Conn
}

func (s *tpmSocket) Write(p []byte) (int, error) {
	if s.conn != nil {
		return 0, errors.New("tpm: a command was sent before the last one's response was read")
	}
	d := net.Dialer{Timeout: tpmCommandTimeout}
	conn, err := d.DialContext(context.Background(), "unix", s.path)
	if err != nil {
		return 0, err
	}
	if err := checkTPMPeer(conn); err != nil {
		_ = conn.Close()
		return 0, fmt.Errorf("tpm: TPM socket %s: %w", s.shown, err)
	}
	if err := conn.SetDeadline(time.Now().Add(tpmCommandTimeout)); err != nil {
		_ = conn.Close()
		return 0, err
	}
	s.conn = conn
	n, err := conn.Write(p)
	return n, s.timeout(err)
}

// checkTPMPeer accepts a connection only to a process of this user's or root's. The socket
// was checked when the key was opened, but each command dials its path again, and a
// directory above it may be another user's, who could put their own socket there later
// (issue 30 second review, N2): the kernel's word on who listens is what counts.
func checkTPMPeer(conn net.Conn) error {
	if err := peercred.CheckOwnerOrRoot(conn); err != nil {
		return fmt.Errorf("%w: kplug sends the key's auth value to the TPM, so it talks only to a TPM of yours", err)
	}
	return nil
}

func (s *tpmSocket) Read(p []byte) (int, error) {
	if s.conn == nil {
		return 0, errors.New("tpm: a response was read before a command was sent")
	}
	n, err := s.conn.Read(p)
	_ = s.conn.Close()
	s.conn = nil
	return n, s.timeout(err)
}

func (s *tpmSocket) timeout(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// swtpm serves one connection at a time and queues the others: a TPM that does
		// not answer is most often one that another program holds.
		return fmt.Errorf("the TPM socket %s did not answer within %v: it is busy (swtpm serves one connection at a time, and another program holds it) or hung", s.shown, tpmCommandTimeout)
	}
	return err
}

func (s *tpmSocket) Close() error {
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn = nil
	return err
}
