//go:build linux

package keys_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/asn1"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/testkit/swtpm"
	"github.com/kplug/kplug/keys"
)

func TestCreateTPMKey(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	pss := &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.SHA256}
	for _, tc := range []struct {
		alg  string
		opts []crypto.SignerOpts
		want func(crypto.PublicKey) bool
	}{
		{"", []crypto.SignerOpts{crypto.SHA256}, isCurve(elliptic.P256())},
		{"ecdsa-p384", []crypto.SignerOpts{crypto.SHA256}, isCurve(elliptic.P384())},
		{"rsa-2048", []crypto.SignerOpts{crypto.SHA256, pss}, isRSA(2048)},
	} {
		t.Run("alg="+tc.alg, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "key.tss2")
			pub, err := keys.CreateTPMKey(path, keys.TPMKeyOptions{Algorithm: tc.alg, Device: tpm.Socket, Description: "test"})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(pub) {
				t.Fatalf("CreateTPMKey(%q) made a %T", tc.alg, pub)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("key file: %v, %v; want mode 0600", fi.Mode(), err)
			}
			// kplug reads what it wrote, with no PIN: the file says the auth value is empty.
			s, c, err := keys.OpenSigner(path, keys.Options{TPMDevice: tpm.Socket})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !s.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(pub) {
				t.Error("the key file opens as another key than the one created")
			}
			for _, o := range tc.opts {
				signAndVerify(t, s, o)
			}
		})
	}

	// tpm2-tools loads the key file's parts under the standard SRK, which it derives from
	// the same template: the file says what other TPM software expects it to.
	path := filepath.Join(tpm.Dir, "tools.tss2")
	if _, err := keys.CreateTPMKey(path, keys.TPMKeyOptions{Device: tpm.Socket}); err != nil {
		t.Fatal(err)
	}
	splitKeyFile(t, path, filepath.Join(tpm.Dir, "tools.pub"), filepath.Join(tpm.Dir, "tools.priv"))
	if err := os.WriteFile(filepath.Join(tpm.Dir, "msg"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustTool(t, tpm, "createprimary", "-C", "o", "-G", "ecc", "-a", srkAttrs, "-c", "srk.ctx")
	mustTool(t, tpm, "load", "-C", "srk.ctx", "-u", "tools.pub", "-r", "tools.priv", "-c", "tools.ctx")
	mustTool(t, tpm, "flushcontext", "-t")
	mustTool(t, tpm, "sign", "-c", "tools.ctx", "-g", "sha256", "-o", "tools.sig", "msg")
	// And the TPM reports the key bound to itself and its parent.
	out := string(mustTool(t, tpm, "readpublic", "-c", "tools.ctx"))
	for _, attr := range []string{"fixedtpm", "fixedparent", "sensitivedataorigin", "userwithauth", "sign"} {
		if !strings.Contains(out, attr) {
			t.Errorf("tpm2_readpublic of a created key lacks %s:\n%s", attr, out)
		}
	}
	if out := mustTool(t, tpm, "getcap", "handles-transient"); len(out) != 0 {
		t.Errorf("transient handles left after CreateTPMKey: %s", out)
	}
}

// splitKeyFile writes a TSS2 key file's public and private parts as tpm2_create writes them.
func splitKeyFile(t *testing.T, path, pub, priv string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "TSS2 PRIVATE KEY" {
		t.Fatalf("%s is not a TSS2 PRIVATE KEY PEM file:\n%s", path, b)
	}
	var k struct {
		Type        asn1.ObjectIdentifier
		EmptyAuth   bool   `asn1:"optional,explicit,tag:0"`
		Description string `asn1:"optional,explicit,tag:4,utf8"`
		Parent      int64
		Pub, Priv   []byte
	}
	if _, err := asn1.Unmarshal(block.Bytes, &k); err != nil {
		t.Fatal(err)
	}
	if !k.EmptyAuth || k.Parent != 0x40000001 || !k.Type.Equal(asn1.ObjectIdentifier{2, 23, 133, 10, 1, 3}) {
		t.Errorf("key file: type %v, emptyAuth %v, parent 0x%x; want a loadable key, TRUE, 0x40000001", k.Type, k.EmptyAuth, k.Parent)
	}
	if err := os.WriteFile(pub, k.Pub, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(priv, k.Priv, 0o600); err != nil {
		t.Fatal(err)
	}
}

func isCurve(c elliptic.Curve) func(crypto.PublicKey) bool {
	return func(p crypto.PublicKey) bool { k, ok := p.(*ecdsa.PublicKey); return ok && k.Curve == c }
}

func isRSA(bits int) func(crypto.PublicKey) bool {
	return func(p crypto.PublicKey) bool { k, ok := p.(*rsa.PublicKey); return ok && k.N.BitLen() == bits }
}

func TestCreateTPMKeyAuthValue(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	dir := t.TempDir()
	pin := filepath.Join(dir, "pin")
	if err := os.WriteFile(pin, []byte("2468\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "key.tss2")
	if _, err := keys.CreateTPMKey(path, keys.TPMKeyOptions{Device: tpm.Socket, PINSource: pin}); err != nil {
		t.Fatal(err)
	}
	// The file does not claim an empty auth value, so kplug asks for the PIN...
	_, _, err := keys.OpenSigner(path, keys.Options{TPMDevice: tpm.Socket})
	if want := " needs an auth value"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("OpenSigner without the PIN = %v, want %q", err, want)
	}
	_, _, err = keys.OpenSigner(path, keys.Options{TPMDevice: tpm.Socket, TPMPIN: "1357"})
	if want := " refused the auth value (wrong PIN)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("OpenSigner with a wrong PIN = %v, want %q", err, want)
	}
	// ...and the key counts towards the TPM's lockout, which protects a PIN.
	if got := lockoutCounter(t, tpm); got == 0 {
		t.Error("wrong PINs of a key with an auth value did not count towards the TPM's lockout")
	}
	s, c, err := keys.OpenSigner("tpm:file="+path+"?pin-source=file:"+pin, keys.Options{TPMDevice: tpm.Socket})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	signAndVerify(t, s, crypto.SHA256)
}

func TestCreateTPMKeyRefusals(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing")
	if err := os.WriteFile(existing, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), link); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty-pin")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		path string
		o    keys.TPMKeyOptions
		want string
	}{
		{"existing file", existing, keys.TPMKeyOptions{}, "tpm: " + existing + " already exists: kplug does not replace a key file"},
		{"symbolic link", link, keys.TPMKeyOptions{}, "tpm: " + link + " already exists"},
		{"algorithm", filepath.Join(dir, "a"), keys.TPMKeyOptions{Algorithm: "ed25519"}, `tpm: unknown key algorithm "ed25519": want one of [ecdsa-p256 ecdsa-p384 rsa-2048 rsa-3072]`},
		{"empty PIN", filepath.Join(dir, "b"), keys.TPMKeyOptions{PINSource: empty}, "tpm: the auth value in " + empty + " is empty"},
		{"no TPM", filepath.Join(dir, "c"), keys.TPMKeyOptions{Device: filepath.Join(dir, "none")}, "tpm: no TPM at " + filepath.Join(dir, "none")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.o.Device == "" {
				tc.o.Device = tpm.Socket
			}
			_, err := keys.CreateTPMKey(tc.path, tc.o)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("CreateTPMKey = %v, want %q...", err, tc.want)
			}
		})
	}
	if b, err := os.ReadFile(existing); err != nil || string(b) != "keep me" {
		t.Errorf("existing file now %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); err == nil {
		t.Error("CreateTPMKey wrote through a symbolic link")
	}
	for _, f := range []string{"a", "b", "c"} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			t.Errorf("a failed CreateTPMKey left %s behind", f)
		}
	}
}

// TestCreatedTPMKeyIsBoundToItsTPM copies a key file to another TPM: it holds only the
// private part encrypted to the first TPM's storage key, so the second cannot load it.
func TestCreatedTPMKeyIsBoundToItsTPM(t *testing.T) {
	first, second := swtpm.NewTestTPM(t), swtpm.NewTestTPM(t)
	path := filepath.Join(t.TempDir(), "key.tss2")
	if _, err := keys.CreateTPMKey(path, keys.TPMKeyOptions{Device: first.Socket}); err != nil {
		t.Fatal(err)
	}
	_, _, err := keys.OpenSigner(path, keys.Options{TPMDevice: second.Socket})
	want := "tpm: TPM key file " + path + " on " + second.Socket + ": loading it (was it created on this TPM, under this parent?): "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("OpenSigner on another TPM = %v, want %q...", err, want)
	}
}
