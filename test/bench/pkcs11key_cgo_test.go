//go:build cgo

package bench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kplug/kplug/internal/testkit/softhsm"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// pkcs11Key generates an ECDSA P-256 key on a fresh SoftHSM2 token and issues a
// certificate for it; it returns the certificate file and the key's URI.
func pkcs11Key(b *testing.B, ca *testpki.CA, dir string) (certFile, keyURI string, err error) {
	tok, err := softhsm.NewToken(filepath.Join(dir, "hsm"), "kplug-bench", "1234")
	if err != nil {
		return "", "", err
	}
	b.Setenv(softhsm.ConfEnv, tok.Conf)
	pub, err := tok.Generate("ecdsa-p256", "bench")
	if err != nil {
		return "", "", err
	}
	pin := filepath.Join(dir, "hsm", "pin")
	if err := os.WriteFile(pin, []byte(tok.PIN), 0o600); err != nil {
		return "", "", err
	}
	return issueClient(b, ca, "pkcs11", pub), tok.URI("bench", pin), nil
}
