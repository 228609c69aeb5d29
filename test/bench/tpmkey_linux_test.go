//go:build linux

package bench

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kplug/kplug/internal/testkit/swtpm"
)

// srkAttrs are the attributes of the standard storage root key, the parent 0x40000001 under
// which tpm2-openssl creates key files (as in keys/tpm_test.go).
const srkAttrs = "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|noda|restricted|decrypt"

// tpmKeys starts a software TPM for tb (stopped when tb ends), creates a key in it for each
// alg (a tpm2_create -G value: ecc256, rsa2048) and returns their tpm: URIs; or it returns
// why it cannot, and the TPM rows are left out, as the PKCS#11 rows are without cgo.
func tpmKeys(tb testing.TB, algs ...string) ([]string, error) {
	if err := swtpm.Installed(); err != nil {
		return nil, err
	}
	tpm := swtpm.NewTestTPM(tb)
	uris := make([]string, len(algs))
	for i, alg := range algs {
		file, err := tpmKeyFile(tpm, fmt.Sprintf("k%d", i), alg)
		if err != nil {
			return nil, err
		}
		uris[i] = tpmURI(file, tpm.Socket)
	}
	return uris, nil
}

// tpmKeyFile creates a key of algorithm alg in tpm with tpm2-tools, under the standard
// SRK, as a user following the tpm2-openssl docs would, and returns the path of its TSS2
// key file. The key has no auth value.
func tpmKeyFile(tpm *swtpm.TPM, name, alg string) (string, error) {
	for _, args := range [][]string{
		{"createprimary", "-C", "o", "-G", "ecc", "-a", srkAttrs, "-c", "srk.ctx"},
		{"create", "-C", "srk.ctx", "-G", alg, "-u", name + ".pub", "-r", name + ".priv"},
		{"encodeobject", "-C", "srk.ctx", "-u", name + ".pub", "-r", name + ".priv", "-o", name + ".tss2"},
	} {
		if _, err := tpm.Tool(args[0], args[1:]...); err != nil {
			return "", fmt.Errorf("creating TPM key %s: %w", name, err)
		}
	}
	return filepath.Join(tpm.Dir, name+".tss2"), nil
}

// tpmURI names a TPM key file on a TPM device or socket.
func tpmURI(keyFile, device string) string {
	return "tpm:file=" + keyFile + "?device=" + device
}
