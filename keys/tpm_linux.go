package keys

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxudstpm"
)

// openTPMDevice opens a TPM character device, or the server socket of a software TPM
// (swtpm socket --server type=unixio), and returns it with the path for messages.
func openTPMDevice(path string) (transport.TPMCloser, string, error) {
	if path == "" {
		path = DefaultTPMDevice
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, path, fmt.Errorf("tpm: no TPM at %s: this machine has no TPM 2.0 or its driver is not loaded (ls /dev/tpm*), or give the TPM with device=", path)
	case err != nil:
		return nil, path, fmt.Errorf("tpm: TPM %s: %w", path, err)
	case fi.Mode()&os.ModeSocket != 0:
		t, err := linuxudstpm.Open(path)
		if err != nil {
			return nil, path, fmt.Errorf("tpm: TPM socket %s: %w", path, err)
		}
		return t, path, nil
	case fi.Mode()&os.ModeCharDevice == 0:
		return nil, path, fmt.Errorf("tpm: %s is not a TPM device (a character device such as %s) or a TPM socket", path, DefaultTPMDevice)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0) //nolint:gosec // the TPM device the user named
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
