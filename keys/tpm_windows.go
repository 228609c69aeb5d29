package keys

import (
	"fmt"

	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/windowstpm"
)

// openTPMDevice opens the TPM through TBS. This path is compiled but not yet tested against
// a Windows TPM.
func openTPMDevice(path string) (transport.TPMCloser, string, error) {
	if path != "" {
		return nil, path, fmt.Errorf("tpm: device=%s: Windows reaches its TPM through TBS; leave device= out", path)
	}
	t, err := windowstpm.Open()
	if err != nil {
		return nil, "TBS", fmt.Errorf("tpm: opening the TPM through TBS (TPM Base Services): %w", err)
	}
	return t, "TBS", nil
}
