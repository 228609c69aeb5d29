package oskeyring

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/godbus/dbus/v5"
)

// open on Linux: Auto is the Secret Service when the session bus has one (running, or
// started on demand), and otherwise the kernel's user keyring: a server, an ssh session,
// a container without a desktop. A Secret Service that is there but fails (locked, not
// answering) is an error, not a reason to store elsewhere.
func open(ctx context.Context, name string, cfg *Config) (Keyring, error) {
	switch name {
	case Kernel:
		return openKernel(cfg.Service)
	case SecretService:
		addr, err := busAddress(cfg.Environ)
		if err != nil {
			return nil, &Error{Keyring: SecretService, Op: "finding the session bus", Err: err,
				Hint: "run in a desktop session, or use --storage kernel-keyring or file"}
		}
		conn, stop, err := dialBus(ctx, addr, cfg.timeout())
		if err != nil {
			return nil, &Error{Keyring: SecretService, Op: "connecting to the session bus " + addr, Err: err,
				Hint: "run in a desktop session, or use --storage kernel-keyring or file"}
		}
		return probeSecretService(ctx, conn, stop, cfg)
	case Auto:
		if addr, err := busAddress(cfg.Environ); err == nil {
			if conn, stop, err := dialBus(ctx, addr, cfg.timeout()); err == nil {
				if ok, _ := hasSecretService(ctx, conn, cfg.timeout()); ok {
					return newSecretService(conn, stop, cfg), nil
				}
				stop()
			}
		}
		return openKernel(cfg.Service)
	case Keychain, CredentialManager:
		return nil, fmt.Errorf("oskeyring: the %s keyring is not on Linux; use %s, %s or %s", name, Auto, SecretService, Kernel)
	}
	return nil, fmt.Errorf("oskeyring: unknown keyring %q", name)
}

// busAddress is where the session bus listens, from the environment as a D-Bus client
// finds it, but never by starting one (dbus-launch): DBUS_SESSION_BUS_ADDRESS, else the
// socket $XDG_RUNTIME_DIR/bus (/run/user/UID/bus) that systemd's user session provides.
func busAddress(environ []string) (string, error) {
	if a := getenv(environ, "DBUS_SESSION_BUS_ADDRESS"); a != "" && a != "autolaunch:" {
		return a, nil
	}
	dir := getenv(environ, "XDG_RUNTIME_DIR")
	if dir == "" {
		dir = filepath.Join("/run/user", strconv.Itoa(os.Geteuid()))
	}
	socket := filepath.Join(dir, "bus")
	info, err := os.Stat(socket)
	if err != nil || info.Mode().Type() != fs.ModeSocket {
		return "", errors.New("DBUS_SESSION_BUS_ADDRESS is not set and there is no " + socket)
	}
	return "unix:path=" + dbus.EscapeBusAddressValue(socket), nil
}

// probeSecretService returns the Secret Service on conn if the bus has one (running, or
// to start on demand), so that asking for it by name fails at Open, not at first use.
func probeSecretService(ctx context.Context, conn *dbus.Conn, stop context.CancelFunc, cfg *Config) (Keyring, error) {
	ok, err := hasSecretService(ctx, conn, cfg.timeout())
	if err == nil && !ok {
		err = errors.New("no " + ssName + " on the session bus (no Secret Service is running, e.g. gnome-keyring-daemon)")
	}
	if err != nil {
		stop()
		return nil, &Error{Keyring: SecretService, Op: "finding the Secret Service", Err: err,
			Hint: "run in a desktop session, or use --storage kernel-keyring or file"}
	}
	return newSecretService(conn, stop, cfg), nil
}
