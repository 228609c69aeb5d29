// Package softhsm sets up SoftHSM2 tokens for tests: a token in its own directory, keys
// generated on it through PKCS#11, so that tests can exercise keys that never leave a
// token. It needs the softhsm2 package (softhsm2-util and the module) and cgo.
package softhsm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ConfEnv names the variable through which SoftHSM2 finds its configuration.
const ConfEnv = "SOFTHSM2_CONF"

// modulePaths are where distributions install the SoftHSM2 module.
var modulePaths = []string{
	"/usr/lib/softhsm/libsofthsm2.so",
	"/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib64/pkcs11/libsofthsm2.so",
	"/usr/local/lib/softhsm/libsofthsm2.so",
	"/opt/homebrew/lib/softhsm/libsofthsm2.so",
}

// Module returns the path of the SoftHSM2 PKCS#11 module, or an error saying what to
// install.
func Module() (string, error) {
	if _, err := exec.LookPath("softhsm2-util"); err != nil {
		return "", errors.New("SoftHSM2 is not installed (softhsm2-util not found; apt-get install softhsm2)")
	}
	for _, p := range modulePaths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("SoftHSM2 module libsofthsm2.so not found in %s", strings.Join(modulePaths, ", "))
}

// Token is an initialised SoftHSM2 token in a directory of its own.
type Token struct {
	Module string
	Conf   string // the SoftHSM2 configuration file, for $SOFTHSM2_CONF
	Label  string
	PIN    string
}

// NewToken initialises a token labelled label with the user PIN pin in dir (0700).
func NewToken(dir, label, pin string) (*Token, error) {
	module, err := Module()
	if err != nil {
		return nil, err
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.MkdirAll(tokens, 0o700); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "softhsm2.conf")
	body := fmt.Sprintf("directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n", tokens)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command("softhsm2-util", "--init-token", "--free", "--label", label, "--pin", pin, "--so-pin", pin+"-so") //nolint:noctx // test setup
	cmd.Env = append(os.Environ(), ConfEnv+"="+conf)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("softhsm2-util --init-token: %w: %s", err, out)
	}
	return &Token{Module: module, Conf: conf, Label: label, PIN: pin}, nil
}

// URI is the PKCS#11 URI of object on the token, with the PIN read from pinFile.
func (t *Token) URI(object, pinFile string) string {
	u := fmt.Sprintf("pkcs11:token=%s;object=%s?module-path=%s", t.Label, object, t.Module)
	if pinFile != "" {
		u += "&pin-source=file:" + pinFile
	}
	return u
}
