//go:build unix

package keys_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kplug/kplug/keys"
)

// TestSecurityKeyFileNotRegular: a key file is read only if it is a regular file of
// reasonable size. A FIFO (which a kubeconfig or exec block may name as its key) made
// kplug block forever, and /dev/zero made it read until memory ran out.
func TestSecurityKeyFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.pem")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ref, want string }{
		{fifo, "is not a regular file"},
		{"file:" + fifo, "is not a regular file"},
		{"tpm:file=" + fifo, "is not a regular file"},
		{"/dev/zero", "is not a regular file"},
		{big, "is larger than 1048576 bytes"},
	} {
		_, _, err := keys.OpenSigner(tc.ref, keys.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenSigner(%s) = %v, want an error with %q", tc.ref, err, tc.want)
		}
	}
}
