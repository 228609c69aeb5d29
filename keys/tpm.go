package keys

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"sync"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"

	"github.com/kplug/kplug/internal/privdir"
)

// tpmPINEnvName is the environment variable the CLI reads Options.TPMPIN from, for messages.
const tpmPINEnvName = "KPLUG_TPM_PIN"

// tpmDeviceEnvName is the environment variable the CLI reads Options.TPMDevice from, for
// messages.
const tpmDeviceEnvName = "KPLUG_TPM_DEVICE"

// DefaultTPMDevice is the TPM that TPM key files and tpm: URIs without device= use on
// Linux: the kernel's resource manager, which many programs may use at once (/dev/tpm0
// admits one). Windows reaches its TPM through TBS, the TPM Base Services, and has no path.
const DefaultTPMDevice = "/dev/tpmrm0"

// tpmKey is a signing key held by a TPM 2.0: loaded once when opened, it signs in the TPM
// for as long as the Source is open, and the private part never leaves it (the TPM only
// ever hands out the private part encrypted to the parent key that lives in the same TPM).
// It is both the Source and the crypto.Signer it returns.
//
// The auth value goes to the TPM in a password session, in the clear on the bus between
// CPU and TPM, as tpm2-tools sends it by default; a salted HMAC session would keep it from
// someone probing that bus, and is not done yet.
type tpmKey struct {
	name   string // what messages call the key, e.g. "TPM key file /k.tss2 on /dev/tpmrm0"
	auth   []byte
	pub    crypto.PublicKey
	public tpm2.TPMTPublic

	mu     sync.Mutex // the transport carries one command at a time
	tpm    transport.TPMCloser
	handle tpm2.TPMHandle
	oname  tpm2.TPM2BName // the key's TPM name, which an authorization session binds to
	flush  bool           // handle is transient, loaded by us: flush it on Close
}

// tpmPINLimit caps a pin-source file: a TPM auth value is at most 64 bytes (the size of
// the key's name hash), so anything much longer is not one.
const tpmPINLimit = 128

// openTPM opens the key u names on its TPM and checks, by signing once, that the TPM holds
// it and accepts its auth value, so that a wrong PIN is a start-up error.
//
// The auth value is pin-source's, else Options.TPMPIN. Without either, a key file whose
// emptyAuth is DER TRUE (0xFF, as tpm2-openssl writes it) uses the empty auth value;
// any other key is tried with it only as a guess, and only while the TPM's lockout
// counter is 0, so that kplug never spends the dictionary-attack allowance of a TPM
// that has seen failures (tpm2-tools 5.4 writes emptyAuth as a non-DER 0x01, and
// inverted, so that is not trusted either way).
func openTPM(u *TPMURI, o Options) (Source, error) {
	auth, explicit := o.TPMPIN, o.TPMPIN != ""
	if u.PINSource != "" {
		b, err := readPINSource(u.PINSource)
		if err != nil {
			return nil, fmt.Errorf("tpm: reading the auth value of %s from pin-source: %w", u.keyName(), err)
		}
		auth, explicit = strings.TrimRight(string(b), "\r\n"), true
	}
	var file *tss2Key
	if u.File != "" {
		b, err := readKeyFile(u.File)
		if err != nil {
			return nil, fmt.Errorf("tpm: reading key: %w", err)
		}
		if file, err = parseTSS2KeyFile(b); err != nil {
			return nil, fmt.Errorf("tpm: key file %s: %w", u.File, err)
		}
	}
	device := u.Device
	if device == "" {
		device = o.TPMDevice
	}
	t, where, err := openTPMDevice(device)
	if err != nil {
		return nil, err
	}
	k := &tpmKey{name: u.keyName() + " on " + where, auth: []byte(auth), tpm: t}
	if file != nil {
		err = k.load(file)
	} else {
		err = k.usePersistent(tpm2.TPMHandle(u.Handle))
	}
	if err == nil && !explicit && (file == nil || !file.emptyAuthTrue()) && !k.public.ObjectAttributes.NoDA {
		err = k.mayGuessEmptyAuth()
	}
	if err == nil {
		err = k.check()
	}
	if err != nil {
		_ = k.Close()
		return nil, err
	}
	return k, nil
}

// readPINSource reads a pin-source file: a regular file only (a FIFO or a device such as
// /dev/zero is refused without blocking on it), of at most tpmPINLimit bytes.
func readPINSource(path string) ([]byte, error) { return privdir.ReadLinked(path, tpmPINLimit) }

// mayGuessEmptyAuth refuses to guess the empty auth value of a key protected by the TPM's
// dictionary-attack lockout once its lockout counter is above 0: each wrong guess counts
// towards locking out every such key on the machine, other users' included.
func (k *tpmKey) mayGuessEmptyAuth() error {
	rsp, err := tpm2.GetCapability{
		Capability:    tpm2.TPMCapTPMProperties,
		Property:      uint32(tpm2.TPMPTLockoutCounter),
		PropertyCount: 1,
	}.Execute(k.tpm)
	if err != nil {
		return k.tpmError("reading the TPM's lockout counter", err)
	}
	props, err := rsp.CapabilityData.Data.TPMProperties()
	if err != nil {
		return fmt.Errorf("tpm: %s: reading the TPM's lockout counter: %w", k.name, err)
	}
	for _, p := range props.TPMProperty {
		if p.Property == tpm2.TPMPTLockoutCounter && p.Value > 0 {
			return fmt.Errorf("tpm: %s needs its auth value (PIN): the TPM has counted %d failed authorizations, so kplug does not guess the empty one; add pin-source=file:PATH to a tpm: URI or set %s", k.name, p.Value, tpmPINEnvName)
		}
	}
	return nil
}

// srkTemplate is the parent a key file with parent 0x40000001 was created under: the ECC
// P-256 storage key of the TCG provisioning guidance with an empty unique field, which is
// the primary tpm2-openssl, tpm2-tss-engine and openssl_tpm2_engine create. The TPM derives
// a primary from its seed and this template, so the same template gives the same key on
// the same TPM, and nothing need be stored.
func srkTemplate() tpm2.TPMTPublic {
	return tpm2.TPMTPublic{
		Type:    tpm2.TPMAlgECC,
		NameAlg: tpm2.TPMAlgSHA256,
		ObjectAttributes: tpm2.TPMAObject{
			FixedTPM:            true,
			FixedParent:         true,
			SensitiveDataOrigin: true,
			UserWithAuth:        true,
			NoDA:                true,
			Restricted:          true,
			Decrypt:             true,
		},
		Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
			Symmetric: tpm2.TPMTSymDefObject{
				Algorithm: tpm2.TPMAlgAES,
				KeyBits:   tpm2.NewTPMUSymKeyBits(tpm2.TPMAlgAES, tpm2.TPMKeyBits(128)),
				Mode:      tpm2.NewTPMUSymMode(tpm2.TPMAlgAES, tpm2.TPMAlgCFB),
			},
			Scheme:  tpm2.TPMTECCScheme{Scheme: tpm2.TPMAlgNull},
			CurveID: tpm2.TPMECCNistP256,
			KDF:     tpm2.TPMTKDFScheme{Scheme: tpm2.TPMAlgNull},
		}),
		Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{}),
	}
}

// load loads a key file's key under its parent. A primary parent is flushed as soon as the
// key is loaded: a loaded key no longer needs it.
func (k *tpmKey) load(f *tss2Key) error {
	pub, err := tpm2.Unmarshal[tpm2.TPM2BPublic](f.PubKey)
	if err != nil {
		return fmt.Errorf("tpm: %s: malformed public part: %w", k.name, err)
	}
	priv, err := tpm2.Unmarshal[tpm2.TPM2BPrivate](f.PrivKey)
	if err != nil {
		return fmt.Errorf("tpm: %s: malformed private part: %w", k.name, err)
	}
	var parent tpm2.AuthHandle
	if f.Parent == tpmOwnerHierarchy {
		if parent, err = k.storageRootKey(); err != nil {
			return err
		}
		defer k.flushHandle(parent.Handle)
	} else {
		h := tpm2.TPMHandle(uint32(f.Parent)) // #nosec G115 -- checked to be a persistent handle
		rp, err := tpm2.ReadPublic{ObjectHandle: h}.Execute(k.tpm)
		if errors.Is(err, tpm2.TPMRCHandle) {
			return fmt.Errorf("tpm: %s: its parent 0x%08x is not in the TPM (tpm2_getcap handles-persistent lists what is): %w", k.name, uint32(h), err)
		}
		if err != nil {
			return k.tpmError(fmt.Sprintf("reading its parent 0x%08x", uint32(h)), err)
		}
		// kplug authorizes the parent with the empty password. Unless the parent is a
		// storage key exempt from dictionary-attack lockout (noDA, as an SRK is), a wrong
		// guess would count towards locking out the TPM.
		pp, err := rp.OutPublic.Contents()
		if err != nil {
			return fmt.Errorf("tpm: %s: its parent 0x%08x has a malformed public area: %w", k.name, uint32(h), err)
		}
		if a := pp.ObjectAttributes; !a.NoDA || !a.Restricted || !a.Decrypt {
			return fmt.Errorf("tpm: %s: its parent 0x%08x is not a storage key with noDA (as an SRK is): kplug uses only such a parent, with the empty auth value, so as not to count towards the TPM's dictionary-attack lockout", k.name, uint32(h))
		}
		parent = tpm2.AuthHandle{Handle: h, Name: rp.Name, Auth: tpm2.PasswordAuth(nil)}
	}
	l, err := tpm2.Load{ParentHandle: parent, InPrivate: *priv, InPublic: *pub}.Execute(k.tpm)
	if errors.Is(err, tpm2.TPMRCAuthFail) || errors.Is(err, tpm2.TPMRCBadAuth) {
		// The key's own auth value is not used to load it: its parent refused the empty one.
		return fmt.Errorf("tpm: %s: its parent 0x%08x refused the empty auth value, which is the only one kplug gives a parent: %w", k.name, uint32(parent.Handle), err)
	}
	if err != nil {
		return k.tpmError("loading it (was it created on this TPM, under this parent?)", err)
	}
	k.handle, k.oname, k.flush = l.ObjectHandle, l.Name, true
	return k.readPublic()
}

// usePersistent uses a key made persistent with TPM2_EvictControl.
func (k *tpmKey) usePersistent(h tpm2.TPMHandle) error {
	k.handle = h
	return k.readPublic()
}

// readPublic reads the key's public area from the TPM, where it cannot be swapped, and
// refuses keys that cannot sign a digest kplug gives them.
func (k *tpmKey) readPublic() error {
	rp, err := tpm2.ReadPublic{ObjectHandle: k.handle}.Execute(k.tpm)
	if err != nil {
		return k.tpmError("reading its public key", err)
	}
	public, err := rp.OutPublic.Contents()
	if err != nil {
		return fmt.Errorf("tpm: %s: malformed public area: %w", k.name, err)
	}
	a := public.ObjectAttributes
	switch {
	case !a.SignEncrypt:
		return fmt.Errorf("tpm: %s is not a signing key (its sign attribute is clear)", k.name)
	case a.Restricted:
		return fmt.Errorf("tpm: %s is a restricted key, which signs only digests the TPM made itself; create an unrestricted signing key", k.name)
	case !a.UserWithAuth:
		return fmt.Errorf("tpm: %s needs a policy session, which kplug does not support; create the key with userwithauth", k.name)
	}
	pub, err := tpm2.Pub(*public)
	if err != nil {
		return fmt.Errorf("tpm: %s: %w", k.name, err)
	}
	if err := checkTLSKeyType(pub); err != nil {
		return fmt.Errorf("tpm: %s: %w", k.name, err)
	}
	k.oname, k.public, k.pub = rp.Name, *public, pub
	return nil
}

// check signs once, so that a key the TPM will not use for us fails when it is opened.
func (k *tpmKey) check() error {
	var opts crypto.SignerOpts = crypto.SHA256
	if _, ok := k.pub.(*rsa.PublicKey); ok && k.keyScheme() == tpm2.TPMAlgRSAPSS {
		opts = &rsa.PSSOptions{Hash: crypto.SHA256}
	}
	_, err := k.Sign(nil, make([]byte, crypto.SHA256.Size()), opts)
	return err
}

// keyScheme is the signature scheme fixed in the key, or TPMAlgNull if it leaves the
// choice to each signature.
func (k *tpmKey) keyScheme() tpm2.TPMAlgID {
	switch k.public.Type {
	case tpm2.TPMAlgECC:
		if p, err := k.public.Parameters.ECCDetail(); err == nil {
			return p.Scheme.Scheme
		}
	case tpm2.TPMAlgRSA:
		if p, err := k.public.Parameters.RSADetail(); err == nil {
			return p.Scheme.Scheme
		}
	}
	return tpm2.TPMAlgNull
}

// Public returns the public key the TPM reported for the key when it was opened.
func (k *tpmKey) Public() crypto.PublicKey { return k.pub }

// Sign signs digest in the TPM: ECDSA keys return an ASN.1 DER signature, RSA keys a PKCS
// #1 v1.5 signature or, when opts is an *rsa.PSSOptions, a PSS one with a salt as long as
// the hash (the only length a TPM makes that crypto/tls accepts). rand is unused: the TPM
// draws its own randomness. Safe for concurrent use; signatures are made one at a time.
func (k *tpmKey) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	sig, err := k.sign(digest, opts)
	if err != nil {
		return nil, err
	}
	if err := k.verify(digest, sig, opts); err != nil {
		return nil, err
	}
	return sig, nil
}

// verify checks a signature the TPM made against the public key read at open. A password
// session does not bind the key's name, so the object at a persistent handle can change
// under kplug (or a TPM or socket can lie): a signature by another key is an error, never
// a signature that the server would tie to this key's certificate.
func (k *tpmKey) verify(digest, sig []byte, opts crypto.SignerOpts) error {
	ok := false
	switch pub := k.pub.(type) {
	case *ecdsa.PublicKey:
		ok = ecdsa.VerifyASN1(pub, digest, sig)
	case *rsa.PublicKey:
		if pss, isPSS := opts.(*rsa.PSSOptions); isPSS {
			ok = rsa.VerifyPSS(pub, opts.HashFunc(), digest, sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthAuto, Hash: pss.Hash}) == nil
		} else {
			ok = rsa.VerifyPKCS1v15(pub, opts.HashFunc(), digest, sig) == nil
		}
	}
	if !ok {
		return fmt.Errorf("tpm: %s: the TPM's signature does not verify against the key's public key: the key at that handle changed since it was opened, or the TPM is not the one it claims to be", k.name)
	}
	return nil
}

// sign signs digest in the TPM.
func (k *tpmKey) sign(digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	h := opts.HashFunc()
	hashAlg, ok := tpmHashAlgs[h]
	if !ok {
		return nil, fmt.Errorf("tpm: %s: cannot sign with hash %v: want SHA-1, SHA-256, SHA-384 or SHA-512", k.name, h)
	}
	if len(digest) != h.Size() {
		return nil, fmt.Errorf("tpm: %s: digest is %d bytes, want %d for %v", k.name, len(digest), h.Size(), h)
	}
	scheme := tpm2.TPMAlgECDSA
	if k.public.Type == tpm2.TPMAlgRSA {
		scheme = tpm2.TPMAlgRSASSA
		if pss, ok := opts.(*rsa.PSSOptions); ok {
			if pss.SaltLength != rsa.PSSSaltLengthAuto && pss.SaltLength != rsa.PSSSaltLengthEqualsHash && pss.SaltLength != h.Size() {
				return nil, fmt.Errorf("tpm: %s: PSS salt length %d: a TPM salts with the hash's length", k.name, pss.SaltLength)
			}
			scheme = tpm2.TPMAlgRSAPSS
		}
	}
	if fixed := k.keyScheme(); fixed != tpm2.TPMAlgNull && fixed != scheme {
		return nil, fmt.Errorf("tpm: %s signs only with scheme %v, not %v", k.name, fixed, scheme)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.tpm == nil {
		return nil, fmt.Errorf("tpm: %s is closed", k.name)
	}
	rsp, err := tpm2.Sign{
		KeyHandle: tpm2.AuthHandle{Handle: k.handle, Name: k.oname, Auth: tpm2.PasswordAuth(k.auth)},
		Digest:    tpm2.TPM2BDigest{Buffer: digest},
		InScheme: tpm2.TPMTSigScheme{
			Scheme:  scheme,
			Details: tpm2.NewTPMUSigScheme(scheme, &tpm2.TPMSSchemeHash{HashAlg: hashAlg}),
		},
		Validation: tpm2.TPMTTKHashCheck{Tag: tpm2.TPMSTHashCheck, Hierarchy: tpm2.TPMRHNull},
	}.Execute(k.tpm)
	if err != nil {
		return nil, k.tpmError("signing", err)
	}
	switch scheme {
	case tpm2.TPMAlgECDSA:
		sig, err := rsp.Signature.Signature.ECDSA()
		if err != nil {
			return nil, fmt.Errorf("tpm: %s: %w", k.name, err)
		}
		return asn1.Marshal(struct{ R, S *big.Int }{
			new(big.Int).SetBytes(sig.SignatureR.Buffer),
			new(big.Int).SetBytes(sig.SignatureS.Buffer),
		})
	case tpm2.TPMAlgRSAPSS:
		sig, err := rsp.Signature.Signature.RSAPSS()
		if err != nil {
			return nil, fmt.Errorf("tpm: %s: %w", k.name, err)
		}
		return sig.Sig.Buffer, nil
	default:
		sig, err := rsp.Signature.Signature.RSASSA()
		if err != nil {
			return nil, fmt.Errorf("tpm: %s: %w", k.name, err)
		}
		return sig.Sig.Buffer, nil
	}
}

var tpmHashAlgs = map[crypto.Hash]tpm2.TPMAlgID{
	crypto.SHA1:   tpm2.TPMAlgSHA1,
	crypto.SHA256: tpm2.TPMAlgSHA256,
	crypto.SHA384: tpm2.TPMAlgSHA384,
	crypto.SHA512: tpm2.TPMAlgSHA512,
}

// tpmError says what failed on the key in words a user can act on, for the TPM errors a
// user can cause: a wrong auth value, a lockout after too many, a handle with no key.
func (k *tpmKey) tpmError(doing string, err error) error {
	switch {
	case (errors.Is(err, tpm2.TPMRCAuthFail) || errors.Is(err, tpm2.TPMRCBadAuth)) && len(k.auth) == 0:
		return fmt.Errorf("tpm: %s needs an auth value: add pin-source=file:PATH to a tpm: URI or set %s: %w", k.name, tpmPINEnvName, err)
	case errors.Is(err, tpm2.TPMRCAuthFail), errors.Is(err, tpm2.TPMRCBadAuth):
		return fmt.Errorf("tpm: %s refused the auth value (wrong PIN): give the key's auth value with pin-source=file:PATH or $%s: %w", k.name, tpmPINEnvName, err)
	case errors.Is(err, tpm2.TPMRCLockout):
		return fmt.Errorf("tpm: %s: the TPM is locked out after too many wrong auth values; wait for it to recover or have its owner run tpm2_dictionarylockout --clear-lockout: %w", k.name, err)
	case errors.Is(err, tpm2.TPMRCHandle):
		return fmt.Errorf("tpm: %s: no key at that handle (tpm2_getcap handles-persistent lists them): %w", k.name, err)
	}
	return fmt.Errorf("tpm: %s: %s: %w", k.name, doing, err)
}

func (k *tpmKey) flushHandle(h tpm2.TPMHandle) {
	_, _ = tpm2.FlushContext{FlushHandle: h}.Execute(k.tpm)
}

// Key returns the key if pub is its public key.
func (k *tpmKey) Key(pub crypto.PublicKey) (crypto.Signer, error) {
	if !publicKeysEqual(k.pub, pub) {
		return nil, fmt.Errorf("tpm: %s does not match the certificate (the certificate is for a different %s key)", k.name, keyTypeName(pub))
	}
	return k, nil
}

func (k *tpmKey) soleKey() (crypto.Signer, error) { return k, nil }

// Close unloads a key loaded from a file and closes the TPM; the signer stops working. A
// persistent key stays in the TPM.
func (k *tpmKey) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.tpm == nil {
		return nil
	}
	if k.flush {
		k.flushHandle(k.handle)
	}
	err := k.tpm.Close()
	k.tpm = nil
	return err
}
