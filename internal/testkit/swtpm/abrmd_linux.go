//go:build linux

package swtpm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/kplug/kplug/internal/testkit/keyringtest"
	"github.com/kplug/kplug/internal/testkit/poll"
)

// tabrmdName is the D-Bus name tpm2-abrmd owns and its TCTI looks for.
const tabrmdName = "com.intel.tss2.Tabrmd"

// tabrmdTCTIGlobs are where distributions install the TCTI library that talks to
// tpm2-abrmd. Debian ships it apart from the daemon, in libtss2-tcti-tabrmd0: without it
// every client fails with "Could not load tcti".
var tabrmdTCTIGlobs = []string{
	"/usr/lib/*-linux-gnu/libtss2-tcti-tabrmd.so*",
	"/usr/lib64/libtss2-tcti-tabrmd.so*",
	"/usr/lib/libtss2-tcti-tabrmd.so*",
	"/usr/local/lib/libtss2-tcti-tabrmd.so*",
}

// ResourceManagerInstalled returns nil if tpm2-abrmd, its TCTI library and dbus-daemon are
// installed, or an error saying what to install.
func ResourceManagerInstalled() error {
	var missing []string
	for cmd, pkg := range map[string]string{"tpm2-abrmd": "tpm2-abrmd", "dbus-daemon": "dbus-daemon"} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing = append(missing, pkg)
		}
	}
	found := false
	for _, g := range tabrmdTCTIGlobs {
		if m, _ := filepath.Glob(g); len(m) > 0 {
			found = true
			break
		}
	}
	if !found {
		missing = append(missing, "libtss2-tcti-tabrmd0")
	}
	if len(missing) > 0 {
		return fmt.Errorf("TPM resource manager not installed (apt-get install tpm2-abrmd libtss2-tcti-tabrmd0 dbus-daemon; missing %s)", strings.Join(missing, ", "))
	}
	return nil
}

// ResourceManager is tpm2-abrmd in front of a TPM, on a D-Bus session bus of its own. It
// swaps objects and sessions in and out of the TPM for its clients, as the kernel's
// /dev/tpmrm0 does for a real TPM: tpm2-pkcs11 and tpm2_ptool keep more objects loaded
// than a TPM has slots for, and fail with "out of memory for object contexts" without one.
type ResourceManager struct {
	// TCTI is the TCTI configuration that reaches the TPM through the resource manager,
	// for $TPM2TOOLS_TCTI and $TPM2_PKCS11_TCTI.
	TCTI string
	// Env is what a client needs to find the resource manager: the bus address.
	Env []string
}

// NewTestResourceManager starts a private session bus and tpm2-abrmd on it in front of t's
// TPM, and stops both when tb ends; or it skips tb when they are not installed, and fails
// it when $KPLUG_E2E_REQUIRED is set. tpm must not be used directly (Tool) while the
// resource manager runs: swtpm serves one connection at a time.
func (t *TPM) NewTestResourceManager(tb testing.TB) *ResourceManager {
	tb.Helper()
	if err := ResourceManagerInstalled(); err != nil {
		keyringtest.Require(tb, err.Error())
	}
	// Not tb.TempDir: the bus socket path must stay under the unix socket limit.
	dir, err := os.MkdirTemp("", "abrmd")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	bus := keyringtest.StartBus(tb, dir)
	// --allow-root: tests run as root in CI, which tpm2-abrmd refuses unless told.
	// --flush-all: a test may have left transient objects in the TPM through Tool.
	cmd := exec.CommandContext(context.Background(), "tpm2-abrmd", "--session", "--allow-root", "--flush-all", "--tcti="+t.TCTI())
	cmd.Env = append(os.Environ(), "DBUS_SESSION_BUS_ADDRESS="+bus)
	exited := keyringtest.StartDaemon(tb, cmd, "tpm2-abrmd")

	conn, err := dbus.Connect(bus)
	if err != nil {
		tb.Fatalf("connecting to the test bus: %v", err)
	}
	defer conn.Close()
	poll.Until(tb, "tpm2-abrmd on the test bus", func() bool {
		select {
		case <-exited:
			tb.Fatal("tpm2-abrmd exited at start")
		default:
		}
		var owned bool
		err := conn.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, tabrmdName).Store(&owned)
		return err == nil && owned
	})
	return &ResourceManager{TCTI: "tabrmd:bus_type=session", Env: []string{"DBUS_SESSION_BUS_ADDRESS=" + bus}}
}
