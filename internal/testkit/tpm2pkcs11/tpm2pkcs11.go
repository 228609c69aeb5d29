//go:build linux

// Package tpm2pkcs11 sets up PKCS#11 tokens whose keys live in a software TPM, through
// tpm2-pkcs11, as a user does with a real TPM: a swtpm, tpm2-abrmd in front of it on a
// private D-Bus session bus, and a tpm2_ptool store of the test's own. It needs the
// libtpm2-pkcs11-1, libtpm2-pkcs11-tools, tpm2-abrmd, libtss2-tcti-tabrmd0 and swtpm
// packages.
package tpm2pkcs11

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/testkit/keyringtest"
	"github.com/kplug/kplug/internal/testkit/swtpm"
)

// modulePaths are where distributions install the tpm2-pkcs11 module.
var modulePaths = []string{
	"/usr/lib/x86_64-linux-gnu/pkcs11/libtpm2_pkcs11.so",
	"/usr/lib/aarch64-linux-gnu/pkcs11/libtpm2_pkcs11.so",
	"/usr/lib64/pkcs11/libtpm2_pkcs11.so",
	"/usr/lib/pkcs11/libtpm2_pkcs11.so",
	"/usr/local/lib/pkcs11/libtpm2_pkcs11.so",
}

// Module returns the path of the tpm2-pkcs11 module, or an error saying what to install.
func Module() (string, error) {
	if _, err := exec.LookPath("tpm2_ptool"); err != nil {
		return "", errors.New("tpm2-pkcs11 is not installed (tpm2_ptool not found; apt-get install libtpm2-pkcs11-1 libtpm2-pkcs11-tools)")
	}
	for _, p := range modulePaths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("tpm2-pkcs11 module libtpm2_pkcs11.so not found in %s", strings.Join(modulePaths, ", "))
}

// Token is a tpm2-pkcs11 token in a store of its own, its keys in a swtpm.
type Token struct {
	Module string
	Label  string
	PIN    string
	// Env is what the module and tpm2_ptool need to find the store and the TPM:
	// $TPM2_PKCS11_STORE, $TPM2_PKCS11_TCTI and $TPM2TOOLS_TCTI (both through the resource
	// manager), and the resource manager's bus.
	Env []string
}

// NewTestToken starts a swtpm with a resource manager, initialises a store and a token
// labelled label in it with tpm2_ptool, sets Env for the rest of t (so that the module
// loaded by the test and the programs it starts find them), and writes the PIN to a file
// for pin-source=file:. It skips t when a package is missing, and fails it when
// $KPLUG_E2E_REQUIRED is set. Everything it started stops when t ends.
func NewTestToken(t testing.TB, label string) (tok *Token, pinFile string) {
	t.Helper()
	module, err := Module()
	if err != nil {
		keyringtest.Require(t, err.Error())
	}
	tpm := swtpm.NewTestTPM(t)
	rm := tpm.NewTestResourceManager(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	tok = &Token{Module: module, Label: label, PIN: "4711", Env: append([]string{
		"TPM2_PKCS11_STORE=" + store,
		"TPM2_PKCS11_TCTI=" + rm.TCTI,
		"TPM2TOOLS_TCTI=" + rm.TCTI,
	}, rm.Env...)}
	for _, kv := range tok.Env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	if _, err := tok.PTool("init"); err != nil {
		t.Fatal(err)
	}
	if _, err := tok.PTool("addtoken", "--pid=1", "--label="+label, "--userpin="+tok.PIN, "--sopin="+tok.PIN+"-so"); err != nil {
		t.Fatal(err)
	}
	pinFile = filepath.Join(dir, "pin")
	if err := os.WriteFile(pinFile, []byte(tok.PIN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tok, pinFile
}

// PTool runs tpm2_ptool with args on the token's store and returns its standard output.
func (tok *Token) PTool(args ...string) ([]byte, error) {
	cmd := exec.Command("tpm2_ptool", args...) //nolint:noctx // short-lived test tool
	cmd.Env = append(os.Environ(), tok.Env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("tpm2_ptool %s: %w: %s", args[0], err, lastLine(stderr.String()))
	}
	return out, nil
}

// lastLine keeps what tpm2_ptool says after a Python traceback: the error itself.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// URI is the PKCS#11 URI of object on the token, with the PIN read from pinFile.
func (tok *Token) URI(object, pinFile string) string {
	u := fmt.Sprintf("pkcs11:token=%s;object=%s?module-path=%s", tok.Label, object, tok.Module)
	if pinFile != "" {
		u += "&pin-source=file:" + pinFile
	}
	return u
}
