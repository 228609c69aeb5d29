// Package pemkey reads PEM private keys, the one parser of kplug's key files: the exec
// proxy's signing and client keys and in-process signing keys (execcred) both use PEM
// files as OpenSSL, cert-manager and kubeadm write them.
package pemkey

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// Parse returns the first PEM private key of b: PKCS#8 ("PRIVATE KEY"), PKCS#1 ("RSA
// PRIVATE KEY") or SEC 1 ("EC PRIVATE KEY"); other blocks, such as certificates, are
// skipped. An encrypted key is refused. Errors never quote the key.
func Parse(b []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return nil, errors.New("no PEM private key in it")
		}
		var key any
		var err error
		switch block.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "ENCRYPTED PRIVATE KEY":
			return nil, errors.New("the key is encrypted; kplug reads unencrypted PEM keys (keep it 0600) or keys on a PKCS#11 token")
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", block.Type, err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported key type %T", key)
		}
		return signer, nil
	}
}

// Certificate returns the first PEM certificate of b (the leaf, in a chain file); other
// blocks, such as a private key in a bundle, are skipped.
func Certificate(b []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return nil, errors.New("no PEM certificate in it")
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing the certificate: %w", err)
		}
		return c, nil
	}
}
