package keys

import (
	"crypto"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/google/go-tpm/tpm2"
	"github.com/kplug/kplug/internal/privdir"
)

// tpmKeyAlgorithms are the algorithms CreateTPMKey accepts, the first its default: the
// ones TLS client authentication and KEP-6308 signing use, that TPM 2.0s commonly have.
var tpmKeyAlgorithms = []string{"ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072"}

// TPMKeyAlgorithms returns the algorithms CreateTPMKey accepts, its default first.
func TPMKeyAlgorithms() []string { return slices.Clone(tpmKeyAlgorithms) }

// TPMKeyOptions say what key CreateTPMKey makes, and in which TPM.
type TPMKeyOptions struct {
	// Algorithm is one of TPMKeyAlgorithms(); empty means ecdsa-p256.
	Algorithm string
	// Device is the TPM, as Options.TPMDevice; empty means DefaultTPMDevice.
	Device string
	// PINSource is a file holding the key's auth value (its PIN), read as a pin-source=
	// file is; empty means the key has none. A key with an auth value is protected by the
	// TPM's dictionary-attack lockout; one without is not (there is nothing to guess).
	PINSource string
	// Description is written into the key file's description field, for people who find
	// the file later.
	Description string
}

// CreateTPMKey creates a signing key in the TPM and writes it to path as a TSS2 key file
// (the format tpm2-openssl writes, so those tools use it too), mode 0600, refusing to
// replace an existing file. It returns the key's public half.
//
// The key is created under the owner hierarchy's standard storage root key (key file
// parent 0x40000001), which the TPM re-derives from its seed whenever the key is loaded,
// so the TPM stores nothing and the key file is all there is to keep. The key is fixedTPM
// and fixedParent: the TPM refuses to duplicate it to another TPM or parent, and what the
// key file holds is the private part encrypted to that storage key, useless on any other
// TPM. kplug has no way to write a private key out, either.
func CreateTPMKey(path string, o TPMKeyOptions) (crypto.PublicKey, error) {
	if o.Algorithm == "" {
		o.Algorithm = tpmKeyAlgorithms[0]
	}
	tmpl, err := tpmKeyTemplate(o.Algorithm)
	if err != nil {
		return nil, err
	}
	var auth []byte
	if o.PINSource != "" {
		b, err := readPINSource(o.PINSource)
		if err != nil {
			return nil, fmt.Errorf("tpm: reading the new key's auth value: %w", err)
		}
		if auth = []byte(strings.TrimRight(string(b), "\r\n")); len(auth) == 0 {
			return nil, fmt.Errorf("tpm: the auth value in %s is empty: leave the PIN source out for a key without one", o.PINSource)
		}
		if len(auth) > crypto.SHA256.Size() {
			return nil, fmt.Errorf("tpm: the auth value in %s is %d bytes; a TPM takes at most %d for a key named with SHA-256", o.PINSource, len(auth), crypto.SHA256.Size())
		}
	} else {
		// Nothing to guess, so no reason for wrong guesses at it to count towards the
		// lockout of the TPM's other keys.
		tmpl.ObjectAttributes.NoDA = true
	}
	// Refuse an existing file before the TPM does any work, and again when writing, where
	// O_EXCL also refuses a symbolic link planted in between.
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("tpm: %s already exists: kplug does not replace a key file (remove it first, if you mean to)", path)
	}
	t, where, err := openTPMDevice(o.Device)
	if err != nil {
		return nil, err
	}
	k := &tpmKey{name: "new TPM key " + path + " on " + where, tpm: t}
	defer k.Close()
	parent, err := k.storageRootKey()
	if err != nil {
		return nil, err
	}
	defer k.flushHandle(parent.Handle)
	created, err := tpm2.Create{
		ParentHandle: parent,
		InSensitive:  tpm2.TPM2BSensitiveCreate{Sensitive: &tpm2.TPMSSensitiveCreate{UserAuth: tpm2.TPM2BAuth{Buffer: auth}}},
		InPublic:     tpm2.New2B(tmpl),
	}.Execute(t)
	if err != nil {
		return nil, k.tpmError("creating the key (does the TPM support "+o.Algorithm+"? tpm2_getcap ecc-curves lists its curves)", err)
	}
	public, err := created.OutPublic.Contents()
	if err != nil {
		return nil, fmt.Errorf("tpm: %s: the TPM returned a malformed public area: %w", k.name, err)
	}
	pub, err := tpm2.Pub(*public)
	if err != nil {
		return nil, fmt.Errorf("tpm: %s: %w", k.name, err)
	}
	der, err := asn1.Marshal(tss2KeyOut{
		Type:        oidLoadableKey,
		EmptyAuth:   len(auth) == 0,
		Description: o.Description,
		Parent:      tpmOwnerHierarchy,
		PubKey:      tpm2.Marshal(created.OutPublic),
		PrivKey:     tpm2.Marshal(created.OutPrivate),
	})
	if err != nil {
		return nil, fmt.Errorf("tpm: %s: encoding the key file: %w", k.name, err)
	}
	if err := writeNewFile(path, pem.EncodeToMemory(&pem.Block{Type: tss2PEMType, Bytes: der})); err != nil {
		return nil, fmt.Errorf("tpm: writing the key file: %w", err)
	}
	return pub, nil
}

// tss2KeyOut is the part of a TSS2 key file kplug writes: emptyAuth as DER TRUE when the
// key has no auth value (left out otherwise, meaning FALSE), and a description.
type tss2KeyOut struct {
	Type        asn1.ObjectIdentifier
	EmptyAuth   bool   `asn1:"optional,explicit,tag:0"`
	Description string `asn1:"optional,explicit,tag:4,utf8"`
	Parent      int64
	PubKey      []byte
	PrivKey     []byte
}

// tpmKeyTemplate is the public template of a new signing key: unrestricted (it signs any
// digest kplug gives it), no fixed scheme (each signature chooses ECDSA, or PKCS #1 v1.5 or
// PSS, as TLS asks), authorized by its auth value (userWithAuth; no policy), and bound to
// this TPM and parent (fixedTPM, fixedParent), its private part made in the TPM
// (sensitiveDataOrigin).
func tpmKeyTemplate(alg string) (tpm2.TPMTPublic, error) {
	t := tpm2.TPMTPublic{
		NameAlg: tpm2.TPMAlgSHA256,
		ObjectAttributes: tpm2.TPMAObject{
			FixedTPM:            true,
			FixedParent:         true,
			SensitiveDataOrigin: true,
			UserWithAuth:        true,
			SignEncrypt:         true,
		},
	}
	ecc := func(curve tpm2.TPMECCCurve) {
		t.Type = tpm2.TPMAlgECC
		t.Parameters = tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
			CurveID: curve,
			Scheme:  tpm2.TPMTECCScheme{Scheme: tpm2.TPMAlgNull},
			KDF:     tpm2.TPMTKDFScheme{Scheme: tpm2.TPMAlgNull},
		})
		t.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{})
	}
	rsa := func(bits tpm2.TPMKeyBits) {
		t.Type = tpm2.TPMAlgRSA
		t.Parameters = tpm2.NewTPMUPublicParms(tpm2.TPMAlgRSA, &tpm2.TPMSRSAParms{
			Scheme:  tpm2.TPMTRSAScheme{Scheme: tpm2.TPMAlgNull},
			KeyBits: bits,
		})
		t.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{})
	}
	switch alg {
	case "ecdsa-p256":
		ecc(tpm2.TPMECCNistP256)
	case "ecdsa-p384":
		ecc(tpm2.TPMECCNistP384)
	case "rsa-2048":
		rsa(2048)
	case "rsa-3072":
		rsa(3072)
	default:
		return t, fmt.Errorf("tpm: unknown key algorithm %q: want one of %v", alg, tpmKeyAlgorithms)
	}
	return t, nil
}

// storageRootKey creates the owner hierarchy's standard storage root key as a transient
// object, the parent of key files with parent 0x40000001; flush its handle when done.
func (k *tpmKey) storageRootKey() (tpm2.AuthHandle, error) {
	srk, err := tpm2.CreatePrimary{
		PrimaryHandle: tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)},
		InPublic:      tpm2.New2B(srkTemplate()),
	}.Execute(k.tpm)
	if errors.Is(err, tpm2.TPMRCAuthFail) || errors.Is(err, tpm2.TPMRCBadAuth) {
		return tpm2.AuthHandle{}, fmt.Errorf("tpm: %s: the owner hierarchy has an auth value, so kplug cannot create the key's parent, the storage root key: %w", k.name, err)
	}
	if err != nil {
		return tpm2.AuthHandle{}, k.tpmError("creating its parent, the storage root key, in the owner hierarchy", err)
	}
	return tpm2.AuthHandle{Handle: srk.ObjectHandle, Name: srk.Name, Auth: tpm2.PasswordAuth(nil)}, nil
}

// writeNewFile writes b to a file that must not exist yet (O_EXCL: nor a symbolic link
// there), mode 0600, removing what it wrote if the write fails.
func writeNewFile(path string, b []byte) error {
	f, err := privdir.Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}
