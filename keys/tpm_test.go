//go:build linux

package keys_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport/linuxudstpm"

	"github.com/kplug/kplug/internal/testkit/swtpm"
	"github.com/kplug/kplug/keys"
)

// srkAttrs are the attributes of the standard storage root key.
const srkAttrs = swtpm.SRKAttributes

// toolsKeyFile creates a key of algorithm alg (a tpm2_create -G value) with tpm2-tools as
// swtpm.TPM.KeyFile does and returns its TSS2 key file. A non-empty auth becomes its auth
// value.
func toolsKeyFile(t *testing.T, tpm *swtpm.TPM, name, alg, auth string) string {
	t.Helper()
	path, _, err := tpm.KeyFile(name, alg, auth)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func mustTool(t *testing.T, tpm *swtpm.TPM, name string, args ...string) []byte {
	t.Helper()
	out, err := tpm.Tool(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// signAndVerify signs with s as crypto/tls and httpsig do and verifies the signature with
// the standard library against s.Public().
func signAndVerify(t *testing.T, s crypto.Signer, opts crypto.SignerOpts) {
	t.Helper()
	digest := sha256.Sum256([]byte("GET /api/v1/namespaces"))
	sig, err := s.Sign(nil, digest[:], opts)
	if err != nil {
		t.Fatal(err)
	}
	switch pub := s.Public().(type) {
	case *ecdsa.PublicKey:
		if !ecdsa.VerifyASN1(pub, digest[:], sig) {
			t.Errorf("ECDSA %s signature does not verify", pub.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if pss, ok := opts.(*rsa.PSSOptions); ok {
			err = rsa.VerifyPSS(pub, crypto.SHA256, digest[:], sig, pss)
		} else {
			err = rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig)
		}
		if err != nil {
			t.Errorf("RSA signature does not verify: %v", err)
		}
	default:
		t.Fatalf("Public() = %T", pub)
	}
}

func TestTPMKeyFiles(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	pss := &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.SHA256}
	for _, tc := range []struct {
		name, alg, auth string
		opts            crypto.SignerOpts
	}{
		{"p256", "ecc256", "", crypto.SHA256},
		{"p256-ecdsa-scheme", "ecc256:ecdsa-sha256", "", crypto.SHA256},
		{"p384-auth", "ecc384", "s3cret", crypto.SHA256},
		{"rsa-pkcs1", "rsa2048", "", crypto.SHA256},
		{"rsa-pss", "rsa2048", "", pss},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := toolsKeyFile(t, tpm, tc.name, tc.alg, tc.auth)
			// A key file works wherever a key file does, and as a tpm: URI.
			for _, ref := range []string{path, "file:" + path, "tpm:file=" + path + "?device=" + tpm.Socket} {
				s, c, err := keys.OpenSigner(ref, keys.Options{TPMDevice: tpm.Socket, TPMPIN: tc.auth})
				if err != nil {
					t.Fatal(err)
				}
				signAndVerify(t, s, tc.opts)
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Sign(nil, make([]byte, 32), crypto.SHA256); err == nil || !strings.HasSuffix(err.Error(), " is closed") {
					t.Errorf("Sign after Close = %v, want an error saying the key is closed", err)
				}
			}
		})
	}
	// Nothing is left loaded in the TPM, which has no resource manager to clean up.
	if out := mustTool(t, tpm, "getcap", "handles-transient"); len(out) != 0 {
		t.Errorf("transient handles left after Close: %s", out)
	}
}

func TestTPMPersistentHandle(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	mustTool(t, tpm, "createprimary", "-C", "o", "-G", "ecc", "-a", srkAttrs, "-c", "srk.ctx")
	mustTool(t, tpm, "create", "-C", "srk.ctx", "-G", "ecc256", "-u", "k.pub", "-r", "k.priv", "-p", "1234")
	mustTool(t, tpm, "load", "-C", "srk.ctx", "-u", "k.pub", "-r", "k.priv", "-c", "k.ctx")
	mustTool(t, tpm, "evictcontrol", "-C", "o", "-c", "k.ctx", "0x81000010")
	mustTool(t, tpm, "readpublic", "-c", "0x81000010", "-f", "pem", "-o", "k.pem")

	pinFile := filepath.Join(tpm.Dir, "pin")
	if err := os.WriteFile(pinFile, []byte("1234\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ks, err := keys.Open("tpm:handle=0x81000010?device="+tpm.Socket+"&pin-source=file:"+pinFile, keys.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	b, err := os.ReadFile(filepath.Join(tpm.Dir, "k.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	want, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ks.Key(want)
	if err != nil {
		t.Fatalf("Key(the public key tpm2_readpublic gives) = %v", err)
	}
	signAndVerify(t, s, crypto.SHA256)

	other, err := ecdsa.GenerateKey(want.(*ecdsa.PublicKey).Curve, nil)
	if err == nil {
		_, err = ks.Key(other.Public())
	}
	wantErr := "tpm: TPM key 0x81000010 on " + tpm.Socket + " does not match the certificate (the certificate is for a different ECDSA P-256 key)"
	if err == nil || err.Error() != wantErr {
		t.Errorf("Key(another key) = %v, want %q", err, wantErr)
	}

	_, _, err = keys.OpenSigner("tpm:handle=0x81000011?device="+tpm.Socket, keys.Options{})
	wantPrefix := "tpm: TPM key 0x81000011 on " + tpm.Socket + ": no key at that handle (tpm2_getcap handles-persistent lists them): "
	if err == nil || !strings.HasPrefix(err.Error(), wantPrefix) {
		t.Errorf("OpenSigner(an empty handle) = %v, want %q...", err, wantPrefix)
	}
}

func TestTPMAuthValue(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	path := toolsKeyFile(t, tpm, "alice", "ecc256", "1234")
	name := "TPM key file " + path + " on " + tpm.Socket
	for _, tc := range []struct {
		name string
		o    keys.Options
		want string
	}{
		// With no PIN and a TPM that has counted no failures, kplug guesses the empty auth
		// value once (tpm2-tools writes emptyAuth unreliably).
		{"none", keys.Options{}, "tpm: " + name + " needs an auth value: add pin-source=file:PATH to a tpm: URI or set KPLUG_TPM_PIN"},
		// The PKCS#11 PIN is never sent to a TPM (F1 of the issue 30 review); and now that
		// the TPM has counted a failure, kplug does not guess again (F2).
		{"pkcs11-pin", keys.Options{PIN: "1234"}, "tpm: " + name + " needs its auth value (PIN): the TPM has counted 1 failed authorizations, so kplug does not guess the empty one; add pin-source=file:PATH to a tpm: URI or set KPLUG_TPM_PIN"},
		{"none-again", keys.Options{}, "tpm: " + name + " needs its auth value (PIN): the TPM has counted 1 failed authorizations"},
		{"wrong", keys.Options{TPMPIN: "4321"}, "tpm: " + name + " refused the auth value (wrong PIN): give the key's auth value with pin-source=file:PATH or $KPLUG_TPM_PIN: TPM_RC_AUTH_FAIL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.TPMDevice = tpm.Socket
			_, _, err := keys.OpenSigner(path, tc.o)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("OpenSigner = %v, want %q...", err, tc.want)
			}
		})
	}
	if got := lockoutCounter(t, tpm); got != 2 {
		t.Errorf("lockout counter = %d, want 2 (one guess, one wrong PIN)", got)
	}
	if out := mustTool(t, tpm, "getcap", "handles-transient"); len(out) != 0 {
		t.Errorf("transient handles left after a failed open: %s", out)
	}
	s, c, err := keys.OpenSigner(path, keys.Options{TPMDevice: tpm.Socket, TPMPIN: "1234"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	signAndVerify(t, s, crypto.SHA256)
}

// lockoutCounter reads TPM2_PT_LOCKOUT_COUNTER, the TPM's count of failed authorizations.
func lockoutCounter(t *testing.T, tpm *swtpm.TPM) uint32 {
	t.Helper()
	conn, err := linuxudstpm.Open(tpm.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rsp, err := tpm2.GetCapability{Capability: tpm2.TPMCapTPMProperties, Property: uint32(tpm2.TPMPTLockoutCounter), PropertyCount: 1}.Execute(conn)
	if err != nil {
		t.Fatal(err)
	}
	props, err := rsp.CapabilityData.Data.TPMProperties()
	if err != nil || len(props.TPMProperty) == 0 || props.TPMProperty[0].Property != tpm2.TPMPTLockoutCounter {
		t.Fatalf("lockout counter: %v %+v", err, props)
	}
	return props.TPMProperty[0].Value
}

// readToolsParts reads the public and private parts tpm2_create wrote for name.
func readToolsParts(t *testing.T, tpm *swtpm.TPM, name string) (tpm2.TPM2BPublic, tpm2.TPM2BPrivate) {
	t.Helper()
	pb, err := os.ReadFile(filepath.Join(tpm.Dir, name+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := os.ReadFile(filepath.Join(tpm.Dir, name+".priv"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := tpm2.Unmarshal[tpm2.TPM2BPublic](pb)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := tpm2.Unmarshal[tpm2.TPM2BPrivate](rb)
	if err != nil {
		t.Fatal(err)
	}
	return *pub, *priv
}

// TestTPMEmptyAuthFlag is F2 of the issue 30 review: a key file whose emptyAuth is DER
// TRUE opens with the empty auth value even once the TPM has counted failures, without a
// guess; one that tpm2-tools 5.4 wrote (0x01) is not trusted, so kplug then asks for a PIN.
func TestTPMEmptyAuthFlag(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	locked := toolsKeyFile(t, tpm, "locked", "ecc256", "1234")
	if _, _, err := keys.OpenSigner(locked, keys.Options{TPMDevice: tpm.Socket, TPMPIN: "0000"}); err == nil {
		t.Fatal("a wrong PIN opened the key")
	}
	tools := toolsKeyFile(t, tpm, "open", "ecc256", "")
	pub, priv := readToolsParts(t, tpm, "open")
	der := writeKeyFile(t, tpm.Dir, "open-der.tss2", 0x40000001, pub, priv)

	s, c, err := keys.OpenSigner(der, keys.Options{TPMDevice: tpm.Socket})
	if err != nil {
		t.Fatalf("OpenSigner(emptyAuth DER TRUE) = %v", err)
	}
	signAndVerify(t, s, crypto.SHA256)
	c.Close()

	_, _, err = keys.OpenSigner(tools, keys.Options{TPMDevice: tpm.Socket})
	want := "tpm: TPM key file " + tools + " on " + tpm.Socket + " needs its auth value (PIN): the TPM has counted 1 failed authorizations"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("OpenSigner(a tpm2-tools key file, no PIN, TPM with failures) = %v, want %q...", err, want)
	}
	if got := lockoutCounter(t, tpm); got != 1 {
		t.Errorf("lockout counter = %d, want 1", got)
	}
}

// TestTPMPersistentParent is F2 of the issue 30 review: kplug authorizes a persistent
// parent with the empty password only if it is a storage key with noDA, and a parent that
// refuses it is named as the one that did, not the key's PIN.
func TestTPMPersistentParent(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	for _, tc := range []struct {
		name, attrs, auth string
		handle            int64
		want              string
	}{
		{"da", "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|decrypt", "", 0x81000002,
			"its parent 0x81000002 is not a storage key with noDA (as an SRK is)"},
		{"auth", srkAttrs, "parentpw", 0x81000003,
			"its parent 0x81000003 refused the empty auth value, which is the only one kplug gives a parent: TPM_RC_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			primary := []string{"-C", "o", "-G", "ecc", "-a", tc.attrs, "-c", tc.name + ".ctx"}
			create := []string{"-C", tc.name + ".ctx", "-G", "ecc256", "-u", tc.name + ".pub", "-r", tc.name + ".priv"}
			if tc.auth != "" {
				primary = append(primary, "-p", tc.auth)
				create = append(create, "-P", tc.auth)
			}
			mustTool(t, tpm, "createprimary", primary...)
			mustTool(t, tpm, "create", create...)
			mustTool(t, tpm, "evictcontrol", "-C", "o", "-c", tc.name+".ctx", fmt.Sprintf("0x%x", tc.handle))
			pub, priv := readToolsParts(t, tpm, tc.name)
			path := writeKeyFile(t, tpm.Dir, tc.name+".tss2", tc.handle, pub, priv)
			_, _, err := keys.OpenSigner(path, keys.Options{TPMDevice: tpm.Socket})
			want := "tpm: TPM key file " + path + " on " + tpm.Socket + ": " + tc.want
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("OpenSigner = %v, want %q...", err, want)
			}
		})
	}
	if got := lockoutCounter(t, tpm); got != 0 {
		t.Errorf("lockout counter = %d, want 0", got)
	}
}

func TestTPMDeviceErrors(t *testing.T) {
	t.Parallel()
	notDevice := filepath.Join(t.TempDir(), "tpm0")
	if err := os.WriteFile(notDevice, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	noSocket := filepath.Join(t.TempDir(), "tpm.sock")
	for _, tc := range []struct{ device, want string }{
		{"/dev/tpmrm97", "tpm: no TPM at /dev/tpmrm97: this machine has no TPM 2.0 or its driver is not loaded (ls /dev/tpm*), or give the TPM with device="},
		{noSocket, "tpm: no TPM at " + noSocket + ": nothing is there; check the device= of the tpm: URI or $KPLUG_TPM_DEVICE (a TPM device such as /dev/tpmrm0, or the socket of a running swtpm)"},
		{notDevice, "tpm: " + notDevice + " is not a TPM device (a character device such as /dev/tpmrm0) or a TPM socket"},
	} {
		_, _, err := keys.OpenSigner("tpm:handle=0x81000001?device="+tc.device, keys.Options{})
		if err == nil || err.Error() != tc.want {
			t.Errorf("OpenSigner(device %s) = %v, want %q", tc.device, err, tc.want)
		}
	}
}

// TestTPMExportRefused shows that the TPM refuses to hand out a key made as kplug expects
// keys to be made (fixedTPM, fixedParent, sensitiveDataOrigin), even to a caller entitled
// to ask: the key's policy allows TPM2_Duplicate, and the TPM still refuses it. It also
// opens a key file whose parent is a persistent SRK.
func TestTPMExportRefused(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	conn, err := linuxudstpm.Open(tpm.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	srk, err := tpm2.CreatePrimary{
		PrimaryHandle: tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)},
		InPublic:      tpm2.New2B(tpm2.ECCSRKTemplate),
	}.Execute(conn)
	if err != nil {
		t.Fatal(err)
	}
	const srkHandle = 0x81000001
	if _, err := (tpm2.EvictControl{
		Auth:             tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)},
		ObjectHandle:     tpm2.NamedHandle{Handle: srk.ObjectHandle, Name: srk.Name},
		PersistentHandle: srkHandle,
	}.Execute(conn)); err != nil {
		t.Fatal(err)
	}
	if _, err := (tpm2.FlushContext{FlushHandle: srk.ObjectHandle}).Execute(conn); err != nil {
		t.Fatal(err)
	}
	parent := tpm2.AuthHandle{Handle: srkHandle, Name: srk.Name, Auth: tpm2.PasswordAuth(nil)}

	policy, err := tpm2.NewPolicyCalculator(tpm2.TPMAlgSHA256)
	if err != nil {
		t.Fatal(err)
	}
	if err := (tpm2.PolicyCommandCode{Code: tpm2.TPMCCDuplicate}).Update(policy); err != nil {
		t.Fatal(err)
	}
	key, err := tpm2.Create{
		ParentHandle: parent,
		InPublic: tpm2.New2B(tpm2.TPMTPublic{
			Type:    tpm2.TPMAlgECC,
			NameAlg: tpm2.TPMAlgSHA256,
			ObjectAttributes: tpm2.TPMAObject{
				FixedTPM: true, FixedParent: true, SensitiveDataOrigin: true,
				UserWithAuth: true, SignEncrypt: true,
			},
			AuthPolicy: tpm2.TPM2BDigest{Buffer: policy.Hash().Digest},
			Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
				CurveID: tpm2.TPMECCNistP256,
				Scheme:  tpm2.TPMTECCScheme{Scheme: tpm2.TPMAlgNull},
				KDF:     tpm2.TPMTKDFScheme{Scheme: tpm2.TPMAlgNull},
			}),
			Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{}),
		}),
	}.Execute(conn)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := tpm2.Load{ParentHandle: parent, InPrivate: key.OutPrivate, InPublic: key.OutPublic}.Execute(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer tpm2.FlushContext{FlushHandle: loaded.ObjectHandle}.Execute(conn) //nolint:errcheck // cleanup

	sess, closeSess, err := tpm2.PolicySession(conn, tpm2.TPMAlgSHA256, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer closeSess() //nolint:errcheck // cleanup
	if _, err := (tpm2.PolicyCommandCode{PolicySession: sess.Handle(), Code: tpm2.TPMCCDuplicate}).Execute(conn); err != nil {
		t.Fatal(err)
	}
	_, err = tpm2.Duplicate{
		ObjectHandle:    tpm2.AuthHandle{Handle: loaded.ObjectHandle, Name: loaded.Name, Auth: sess},
		NewParentHandle: tpm2.TPMRHNull,
		Symmetric:       tpm2.TPMTSymDef{Algorithm: tpm2.TPMAlgNull},
	}.Execute(conn)
	if !errors.Is(err, tpm2.TPMRCAttributes) {
		t.Errorf("TPM2_Duplicate of a fixedParent key = %v, want TPM_RC_ATTRIBUTES", err)
	}

	// The same key, as a key file under the persistent SRK, signs through kplug.
	path := writeKeyFile(t, tpm.Dir, "fixed.tss2", srkHandle, key.OutPublic, key.OutPrivate)
	s, c, err := keys.OpenSigner(path, keys.Options{TPMDevice: tpm.Socket})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	signAndVerify(t, s, crypto.SHA256)

	// Under a parent the TPM does not hold, it says which.
	path = writeKeyFile(t, tpm.Dir, "orphan.tss2", srkHandle+1, key.OutPublic, key.OutPrivate)
	_, _, err = keys.OpenSigner(path, keys.Options{TPMDevice: tpm.Socket})
	want := "tpm: TPM key file " + path + " on " + tpm.Socket + ": its parent 0x81000002 is not in the TPM (tpm2_getcap handles-persistent lists what is): "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("OpenSigner(a key file under a missing parent) = %v, want %q...", err, want)
	}
}

// writeKeyFile writes a TSS2 key file with emptyAuth TRUE, as tpm2-openssl writes one.
func writeKeyFile(t *testing.T, dir, name string, parent int64, pub tpm2.TPM2BPublic, priv tpm2.TPM2BPrivate) string {
	t.Helper()
	der, err := asn1.Marshal(struct {
		Type      asn1.ObjectIdentifier
		EmptyAuth bool `asn1:"explicit,tag:0"`
		Parent    int64
		Pub, Priv []byte
	}{asn1.ObjectIdentifier{2, 23, 133, 10, 1, 3}, true, parent, tpm2.Marshal(pub), tpm2.Marshal(priv)})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "TSS2 PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTPMConcurrentSign signs from many goroutines at once, as TLS handshakes and
// signed requests do, through the one connection a key holds.
func TestTPMConcurrentSign(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	s, c, err := keys.OpenSigner(toolsKeyFile(t, tpm, "k", "ecc256", ""), keys.Options{TPMDevice: tpm.Socket})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			digest := sha256.Sum256([]byte{byte(i)})
			sig, err := s.Sign(nil, digest[:], crypto.SHA256)
			if err != nil {
				t.Error(err)
			} else if !ecdsa.VerifyASN1(s.Public().(*ecdsa.PublicKey), digest[:], sig) {
				t.Errorf("signature %d does not verify", i)
			}
		})
	}
	wg.Wait()
}

// BenchmarkTPMSign is the cost of one signature through the key package, by a key in
// process ("file") and by the same kind of key in swtpm ("tpm"), and what kplug adds to
// each TPM signature in process: checking it against the key's public key ("verify").
// swtpm signs in software on the CPU; docs/benchmarks.md has what a real TPM takes.
func BenchmarkTPMSign(b *testing.B) {
	digest := sha256.Sum256([]byte("x"))
	for _, alg := range []struct{ name, tool string }{{"ecdsa-p256", "ecc256"}, {"rsa-2048", "rsa2048"}} {
		var file crypto.Signer
		var err error
		if alg.tool == "ecc256" {
			file, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		} else {
			file, err = rsa.GenerateKey(rand.Reader, 2048)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Run(alg.name+"/file", func(b *testing.B) {
			for b.Loop() {
				if _, err := file.Sign(rand.Reader, digest[:], crypto.SHA256); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(alg.name+"/tpm", func(b *testing.B) {
			tpm := swtpm.NewTestTPM(b)
			path, err := benchKeyFile(tpm, alg.tool)
			if err != nil {
				b.Fatal(err)
			}
			s, c, err := keys.OpenSigner(path, keys.Options{TPMDevice: tpm.Socket})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			for b.Loop() {
				if _, err := s.Sign(nil, digest[:], crypto.SHA256); err != nil {
					b.Fatal(err)
				}
			}
		})
		sig, err := file.Sign(rand.Reader, digest[:], crypto.SHA256)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(alg.name+"/verify", func(b *testing.B) {
			for b.Loop() {
				var ok bool
				switch pub := file.Public().(type) {
				case *ecdsa.PublicKey:
					ok = ecdsa.VerifyASN1(pub, digest[:], sig)
				case *rsa.PublicKey:
					ok = rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig) == nil
				}
				if !ok {
					b.Fatal("signature does not verify")
				}
			}
		})
	}
}

func benchKeyFile(tpm *swtpm.TPM, alg string) (string, error) {
	for _, args := range [][]string{
		{"createprimary", "-C", "o", "-G", "ecc", "-a", srkAttrs, "-c", "srk.ctx"},
		{"create", "-C", "srk.ctx", "-G", alg, "-u", "k.pub", "-r", "k.priv"},
		{"encodeobject", "-C", "srk.ctx", "-u", "k.pub", "-r", "k.priv", "-o", "k.tss2"},
	} {
		if _, err := tpm.Tool(args[0], args[1:]...); err != nil {
			return "", err
		}
	}
	return filepath.Join(tpm.Dir, "k.tss2"), nil
}
