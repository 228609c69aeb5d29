package keys

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/kplug/kplug/internal/pemkey"
	"github.com/kplug/kplug/internal/privdir"
)

// Source finds the private key that belongs to a certificate's public key. It is asked
// again when the certificate changes, so that a rotated certificate finds its new key.
// Implementations are safe for concurrent use.
type Source interface {
	// Key returns a signer whose public key equals pub, or an error that says why there
	// is none (e.g. the key and the certificate do not match).
	Key(pub crypto.PublicKey) (crypto.Signer, error)
	// Close releases the source (a PKCS#11 session); signers it returned stop working.
	Close() error
}

// Options are what a key URI may leave out.
type Options struct {
	// PIN logs in to a PKCS#11 token whose URI has no pin-source. The CLI reads it from
	// $KPLUG_PKCS11_PIN; it is never logged, and never sent to a TPM.
	PIN string
	// PKCS11Module is the PKCS#11 module for URIs without module-path; the CLI reads it
	// from $KPLUG_PKCS11_MODULE.
	PKCS11Module string
	// TPMDevice is the TPM for TPM key files and tpm: URIs without device=: a device such
	// as /dev/tpm0, or the server socket of a swtpm. Empty means DefaultTPMDevice.
	TPMDevice string
	// TPMPIN is the auth value of a TPM key whose URI has no pin-source. The CLI reads it
	// from $KPLUG_TPM_PIN; it is never logged, and never sent to a PKCS#11 token.
	TPMPIN string
}

// Open opens the private key a URI names:
//
//   - a file path, or file:PATH: a PEM private key (PKCS#8, PKCS#1 or SEC 1), read again
//     whenever the certificate changes; or a TPM 2.0 key file ("TSS2 PRIVATE KEY", as
//     tpm2-openssl and tpm2_encodeobject write it), loaded into DefaultTPMDevice;
//   - tpm:file=PATH or tpm:handle=0x81000001 (see TPMURI; also the query attributes
//     device= and pin-source=file:PATH): a key held by a TPM 2.0, which signs in the TPM
//     and never leaves it. Needs no cgo;
//   - pkcs11:token=T;object=O (RFC 7512; also id=, serial=, and the query attributes
//     module-path= and pin-source=file:PATH): a key on a PKCS#11 token, which signs on the
//     token and never leaves it. Needs a build with cgo.
func Open(uri string, o Options) (Source, error) {
	switch {
	case uri == "":
		return nil, errors.New("no key given")
	case hasScheme(uri, "pkcs11"):
		u, err := ParsePKCS11URI("pkcs11:" + uri[len("pkcs11:"):])
		if err != nil {
			return nil, err
		}
		return openPKCS11(u, o)
	case hasScheme(uri, "tpm"):
		u, err := ParseTPMURI("tpm:" + uri[len("tpm:"):])
		if err != nil {
			return nil, err
		}
		return openTPM(u, o)
	case hasScheme(uri, "file"):
		u, err := url.Parse(uri)
		if err != nil {
			return nil, fmt.Errorf("key URI %q: %w", uri, err)
		}
		path := u.Path
		if path == "" {
			path = u.Opaque
		}
		return openFile(path, o)
	}
	// Anything else with a scheme is a key store kplug does not know; "C:\k.pem" and
	// "./a:b.pem" are paths.
	if scheme, _, ok := strings.Cut(uri, ":"); ok && len(scheme) > 1 && !strings.ContainsAny(scheme, `/\.`) {
		shown, _, _ := strings.Cut(uri, "?") // a query may hold a secret
		return nil, fmt.Errorf("key URI %q: unsupported scheme %q: want a file path, file:PATH, a pkcs11: or a tpm: URI", shown, scheme)
	}
	return openFile(uri, o)
}

// openFile opens a key file: a TPM 2.0 key file goes to the TPM, anything else is a PEM
// private key. A file that cannot be read is a fileKey, which says why when asked for the
// key.
func openFile(path string, o Options) (Source, error) {
	if b, err := readKeyFile(path); err == nil && isTSS2KeyFile(b) {
		return openTPM(&TPMURI{File: path}, o)
	}
	return fileKey(path), nil
}

// hasScheme reports whether uri starts with scheme and a colon; schemes are case-insensitive.
func hasScheme(uri, scheme string) bool {
	return len(uri) > len(scheme) && uri[len(scheme)] == ':' && strings.EqualFold(uri[:len(scheme)], scheme)
}

// fileKey is a PEM private key file.
type fileKey string

func (f fileKey) Key(pub crypto.PublicKey) (crypto.Signer, error) {
	key, err := f.soleKey()
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(key.Public(), pub) {
		return nil, fmt.Errorf("key %s does not match the certificate (the certificate is for a different %s key)", f, keyTypeName(pub))
	}
	return key, nil
}

func (fileKey) Close() error { return nil }

type equaler interface{ Equal(crypto.PublicKey) bool }

func publicKeysEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// checkTLSKeyType refuses keys that TLS 1.2 and 1.3 cannot sign with or that are too weak.
func checkTLSKeyType(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() >= 2048 {
			return nil
		}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
	case ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("unsupported key type %s: want ECDSA P-256, P-384 or P-521, RSA of at least 2048 bits, or Ed25519", keyTypeName(pub))
}

// certificateHolder is a Source that also stores the certificate (a PKCS#11 token).
type certificateHolder interface {
	certificate() ([]byte, error)
}

// soleKeyer is a Source that can name its key without a certificate to match.
type soleKeyer interface {
	soleKey() (crypto.Signer, error)
}

// OpenSigner opens the key a URI names (see Open) for signing requests, where no
// certificate says which public key to expect: the URI must name exactly one key. Close
// the returned io.Closer when done with the signer.
func OpenSigner(uri string, o Options) (crypto.Signer, io.Closer, error) {
	ks, err := Open(uri, o)
	if err != nil {
		return nil, nil, err
	}
	key, err := ks.(soleKeyer).soleKey()
	if err != nil {
		_ = ks.Close()
		return nil, nil, err
	}
	return key, ks, nil
}

func (f fileKey) soleKey() (crypto.Signer, error) {
	b, err := readKeyFile(string(f))
	if err != nil {
		return nil, fmt.Errorf("reading key: %w", err)
	}
	key, err := pemkey.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", f, err)
	}
	return key, nil
}

// keyFileLimit bounds a key file: an 8192-bit RSA key in PEM is under 7 KiB.
const keyFileLimit = 1 << 20

// readKeyFile reads a key file: a regular file, through symbolic links (people link keys
// from elsewhere), never blocking on a FIFO nor reading a device such as /dev/zero without
// end, at most keyFileLimit bytes.
func readKeyFile(path string) ([]byte, error) { return privdir.ReadLinked(path, keyFileLimit) }
