package oskeyring

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// kernel is the Linux kernel's keyring (keyctl(2)): items are keys of type "user" in the
// user keyring (@u), which every process of the user shares, terminal and desktop
// sessions alike (a session keyring is per login). Keys live in kernel memory only, until
// they are deleted, their TTL passes, or the machine restarts.
//
// Keys are made readable by their owner's UID whether or not the process possesses them
// (permissions possessor and user: all; group and others: none), since a process started
// outside the login session (a systemd service, an IDE) may not have @u in its session
// keyring.
type kernel struct{ service string }

const (
	keyType = "user"
	// keyPerm: possessor and user (the key's UID) may view, read, write, search, link and
	// set attributes; group and others nothing.
	keyPerm = 0x3f3f0000
)

func openKernel(service string) (Keyring, error) {
	// One cheap call that says whether keyctl works here at all: containers often forbid
	// it (Docker's default seccomp profile does).
	if _, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_USER_KEYRING, true); err != nil {
		return nil, kernelError("opening the user keyring", err)
	}
	return &kernel{service: service}, nil
}

func (k *kernel) Name() string   { return Kernel }
func (k *kernel) ItemLimit() int { return kernelItemLimit }
func (k *kernel) Close() error   { return nil }

func (k *kernel) describe(account string) string { return k.service + ":" + account }

func (k *kernel) Set(_ context.Context, it Item) error {
	id, err := unix.AddKey(keyType, k.describe(it.Account), it.Secret, unix.KEY_SPEC_USER_KEYRING)
	if err != nil {
		return kernelError("storing "+it.Account, err)
	}
	if err := unix.KeyctlSetperm(id, keyPerm); err != nil {
		_, _ = unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0)
		return kernelError("setting the permissions of "+it.Account, err)
	}
	if it.TTL > 0 {
		secs := int(max((it.TTL+time.Second-1)/time.Second, 1))
		if _, err := unix.KeyctlInt(unix.KEYCTL_SET_TIMEOUT, id, secs, 0, 0); err != nil {
			_, _ = unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0)
			return kernelError("setting the timeout of "+it.Account, err)
		}
	}
	return nil
}

func (k *kernel) find(account string) (int, error) {
	id, err := unix.KeyctlSearch(unix.KEY_SPEC_USER_KEYRING, keyType, k.describe(account), 0)
	if errors.Is(err, unix.ENOKEY) || errors.Is(err, unix.EKEYEXPIRED) || errors.Is(err, unix.EKEYREVOKED) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, kernelError("looking up "+account, err)
	}
	return id, nil
}

func (k *kernel) Get(_ context.Context, account string) ([]byte, error) {
	id, err := k.find(account)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 4096)
	for {
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0)
		if errors.Is(err, unix.EKEYEXPIRED) || errors.Is(err, unix.EKEYREVOKED) || errors.Is(err, unix.ENOKEY) {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, kernelError("reading "+account, err)
		}
		if n <= len(buf) {
			return buf[:n], nil
		}
		buf = make([]byte, n) // it grew meanwhile: read again
	}
}

func (k *kernel) Delete(_ context.Context, account string) error {
	id, err := k.find(account)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0); err != nil &&
		!errors.Is(err, unix.ENOKEY) && !errors.Is(err, unix.EKEYEXPIRED) && !errors.Is(err, unix.EKEYREVOKED) {
		return kernelError("deleting "+account, err)
	}
	return nil
}

// Accounts lists the service's keys linked in the user keyring.
func (k *kernel) Accounts(_ context.Context) ([]string, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, unix.KEY_SPEC_USER_KEYRING, buf, 0)
		if err != nil {
			return nil, kernelError("listing the user keyring", err)
		}
		if n <= len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, n)
	}
	prefix := k.service + ":"
	var out []string
	for len(buf) >= 4 {
		id := int(int32(binary.NativeEndian.Uint32(buf))) //nolint:gosec // key serials are int32 (key_serial_t)
		buf = buf[4:]
		d, err := unix.KeyctlString(unix.KEYCTL_DESCRIBE, id)
		if err != nil {
			continue // gone meanwhile, or not ours to see
		}
		// type;uid;gid;perm;description
		f := strings.SplitN(d, ";", 5)
		if len(f) == 5 && f[0] == keyType {
			if account, ok := strings.CutPrefix(f[4], prefix); ok {
				out = append(out, account)
			}
		}
	}
	return out, nil
}

// kernelError says what failed and, for the errors a user can act on, what to do.
func kernelError(op string, err error) error {
	e := &Error{Keyring: Kernel, Op: op, Err: err}
	switch {
	case errors.Is(err, unix.EDQUOT):
		e.Err = fmt.Errorf("%w: the user's kernel key quota is used up (%w)", ErrTooBig, err)
		e.Hint = "see /proc/key-users and /proc/sys/kernel/keys/maxbytes and maxkeys; `keyctl show @u` lists the keys"
	case errors.Is(err, unix.EINVAL) && strings.HasPrefix(op, "storing"):
		e.Err = fmt.Errorf("%w: larger than a kernel key holds (%w)", ErrTooBig, err)
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		e.Hint = "keyctl is not permitted here (containers often forbid it); use another --storage"
	}
	return e
}
