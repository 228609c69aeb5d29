//go:build unix

package execcred

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kplug/kplug/httpsig"
)

// TestSecuritySigningFilesNotRegular (issue 30 second review, informational): a
// kubeconfig's httpSignature certFile, keyFile or credentialBundleFile naming a FIFO made
// every request wait forever, and /dev/zero read until memory ran out.
func TestSecuritySigningFilesNotRegular(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{httpsig.AudienceHeader: testAudience}
	for _, tc := range []struct {
		files *KeyFiles
		want  string
	}{
		{&KeyFiles{CertFile: fifo, KeyFile: fifo, Headers: headers}, "httpSignature.certFile: " + fifo + " is not a regular file"},
		{&KeyFiles{BundleFile: "/dev/zero", Headers: headers}, "httpSignature.credentialBundleFile: /dev/zero is not a regular file"},
		{&KeyFiles{CertFile: big, KeyFile: big, Headers: headers}, "httpSignature.certFile: " + big + " is larger than 1048576 bytes"},
	} {
		_, err := tc.files.Credential(t.Context(), nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Credential = %v, want %q...", err, tc.want)
		}
	}
}
