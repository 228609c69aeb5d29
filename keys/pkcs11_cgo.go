//go:build cgo

package keys

import (
	"crypto"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ThalesGroup/crypto11"
	"github.com/miekg/pkcs11"
)

// pkcs11Key is a key on a PKCS#11 token, used through crypto11: every signature is made
// by the token.
type pkcs11Key struct {
	uri *PKCS11URI
	ctx *crypto11.Context
}

func openPKCS11(u *PKCS11URI, o Options) (Source, error) {
	module := u.ModulePath
	if module == "" {
		module = o.PKCS11Module
	}
	if module == "" {
		return nil, errors.New("pkcs11: no module: add module-path=/path/to/module.so to the URI or set KPLUG_PKCS11_MODULE")
	}
	if _, err := os.Stat(module); err != nil {
		return nil, fmt.Errorf("pkcs11: module %s: %w", module, err)
	}
	pin := o.PIN
	if u.PINSource != "" {
		b, err := os.ReadFile(u.PINSource)
		if err != nil {
			return nil, fmt.Errorf("pkcs11: reading the PIN from pin-source: %w", err)
		}
		pin = strings.TrimRight(string(b), "\r\n")
	}
	if pin == "" {
		return nil, fmt.Errorf("pkcs11: no PIN for %s: add pin-source=file:PATH to the URI or set KPLUG_PKCS11_PIN", u.tokenName())
	}
	ctx, err := crypto11.Configure(&crypto11.Config{Path: module, TokenLabel: u.Token, TokenSerial: u.Serial, Pin: pin})
	if err != nil {
		var code pkcs11.Error
		switch {
		case errors.As(err, &code) && (code == pkcs11.CKR_PIN_INCORRECT || code == pkcs11.CKR_PIN_INVALID || code == pkcs11.CKR_PIN_LEN_RANGE):
			return nil, fmt.Errorf("pkcs11: %s refused the PIN: %w", u.tokenName(), code)
		case errors.As(err, &code) && code == pkcs11.CKR_PIN_LOCKED:
			return nil, fmt.Errorf("pkcs11: the PIN of %s is locked; unlock it with the SO PIN", u.tokenName())
		case strings.Contains(err.Error(), "could not find PKCS#11 token"):
			return nil, fmt.Errorf("pkcs11: no %s in module %s", u.tokenName(), module)
		}
		return nil, fmt.Errorf("pkcs11: opening %s with module %s: %w", u.tokenName(), module, err)
	}
	k := &pkcs11Key{uri: u, ctx: ctx}
	// A missing object is a start-up error, whatever certificate comes with it.
	keys, err := k.find()
	if err != nil {
		_ = ctx.Close()
		return nil, err
	}
	if len(keys) == 0 {
		_ = ctx.Close()
		return nil, fmt.Errorf("pkcs11: no private key %s on %s", u.objectName(), u.tokenName())
	}
	return k, nil
}

func (k *pkcs11Key) find() ([]crypto11.Signer, error) {
	var label []byte
	if k.uri.Object != "" {
		label = []byte(k.uri.Object)
	}
	keys, err := k.ctx.FindKeyPairs(k.uri.ID, label)
	if err != nil {
		return nil, fmt.Errorf("pkcs11: looking up %s on %s: %w", k.uri.objectName(), k.uri.tokenName(), err)
	}
	return keys, nil
}

// Key looks the key up again each time, so that a key replaced on the token under the same
// label is found for the certificate issued for it.
func (k *pkcs11Key) Key(pub crypto.PublicKey) (crypto.Signer, error) {
	keys, err := k.find()
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("pkcs11: no private key %s on %s", k.uri.objectName(), k.uri.tokenName())
	}
	for _, key := range keys {
		if publicKeysEqual(key.Public(), pub) {
			return key, nil
		}
	}
	return nil, fmt.Errorf("pkcs11: key %s on %s does not match the certificate (the certificate is for a different %s key)", k.uri.objectName(), k.uri.tokenName(), keyTypeName(pub))
}

func (k *pkcs11Key) Close() error { return k.ctx.Close() }

func (k *pkcs11Key) soleKey() (crypto.Signer, error) {
	keys, err := k.find()
	if err != nil {
		return nil, err
	}
	if len(keys) != 1 {
		return nil, fmt.Errorf("pkcs11: %d keys match %s on %s; name one with id=", len(keys), k.uri.objectName(), k.uri.tokenName())
	}
	return keys[0], nil
}

// certificate returns the certificate object stored under the URI's label and id, as PEM,
// or nil if there is none.
func (k *pkcs11Key) certificate() ([]byte, error) {
	var label []byte
	if k.uri.Object != "" {
		label = []byte(k.uri.Object)
	}
	cert, err := k.ctx.FindCertificate(k.uri.ID, label, nil)
	if err != nil {
		return nil, fmt.Errorf("pkcs11: looking up the certificate %s on %s: %w", k.uri.objectName(), k.uri.tokenName(), err)
	}
	if cert == nil {
		return nil, fmt.Errorf("pkcs11: no certificate %s on %s: pass --client-cert, or store the certificate on the token under the key's label", k.uri.objectName(), k.uri.tokenName())
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), nil
}
