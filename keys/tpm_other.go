//go:build !linux && !windows

package keys

import (
	"fmt"
	"runtime"

	"github.com/google/go-tpm/tpm2/transport"
)

func openTPMDevice(path string) (transport.TPMCloser, string, error) {
	return nil, path, fmt.Errorf("tpm: TPM 2.0 keys are supported on Linux and Windows, not on %s", runtime.GOOS)
}
