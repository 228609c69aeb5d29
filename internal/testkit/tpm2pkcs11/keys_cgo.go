//go:build cgo && linux

package tpm2pkcs11

import (
	"crypto"
	"fmt"

	"github.com/ThalesGroup/crypto11"
)

// AddKey creates a key labelled label on the token with tpm2_ptool addkey, as a user does;
// algorithm is one of its --algorithm values (ecc256, ecc384, rsa2048, ...). It returns the
// public key, read through the module, so that tests compare kplug's view of the key with
// one that does not go through kplug.
func (tok *Token) AddKey(label, algorithm string) (crypto.PublicKey, error) {
	if _, err := tok.PTool("addkey", "--label="+tok.Label, "--key-label="+label, "--userpin="+tok.PIN, "--algorithm="+algorithm); err != nil {
		return nil, err
	}
	ctx, err := crypto11.Configure(&crypto11.Config{Path: tok.Module, TokenLabel: tok.Label, Pin: tok.PIN})
	if err != nil {
		return nil, fmt.Errorf("tpm2pkcs11: opening token %q: %w", tok.Label, err)
	}
	defer ctx.Close()
	key, err := ctx.FindKeyPair(nil, []byte(label))
	if err != nil {
		return nil, fmt.Errorf("tpm2pkcs11: looking up key %q: %w", label, err)
	}
	if key == nil {
		return nil, fmt.Errorf("tpm2pkcs11: no key %q on token %q after tpm2_ptool addkey", label, tok.Label)
	}
	return key.Public(), nil
}
