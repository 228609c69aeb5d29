//go:build cgo

package softhsm

import (
	"crypto"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"

	"github.com/ThalesGroup/crypto11"
)

// Generate creates a key pair labelled label on the token (kind "ecdsa-p256", "ecdsa-p224"
// or "rsa-2048") and returns its public key. $SOFTHSM2_CONF must name t.Conf.
func (t *Token) Generate(kind, label string) (crypto.PublicKey, error) {
	ctx, err := crypto11.Configure(&crypto11.Config{Path: t.Module, TokenLabel: t.Label, Pin: t.PIN})
	if err != nil {
		return nil, err
	}
	defer ctx.Close()
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	var key crypto11.Signer
	switch kind {
	case "ecdsa-p256":
		key, err = ctx.GenerateECDSAKeyPairWithLabel(id, []byte(label), elliptic.P256())
	case "ecdsa-p224":
		key, err = ctx.GenerateECDSAKeyPairWithLabel(id, []byte(label), elliptic.P224())
	case "rsa-2048":
		key, err = ctx.GenerateRSAKeyPairWithLabel(id, []byte(label), 2048)
	default:
		return nil, fmt.Errorf("softhsm: unknown key kind %q", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("softhsm: generating %s: %w", kind, err)
	}
	return key.Public(), nil
}

// StoreCertificate stores der as the certificate object labelled label, replacing any
// certificate with that label.
func (t *Token) StoreCertificate(label string, der []byte) error {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	ctx, err := crypto11.Configure(&crypto11.Config{Path: t.Module, TokenLabel: t.Label, Pin: t.PIN})
	if err != nil {
		return err
	}
	defer ctx.Close()
	if err := ctx.DeleteCertificate(nil, []byte(label), nil); err != nil {
		return err
	}
	return ctx.ImportCertificateWithLabel([]byte(label), []byte(label), cert)
}
