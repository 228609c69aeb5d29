package swtpm

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
)

// SRKAttributes are the attributes of the standard storage root key, which tpm2-openssl
// and tpm2-tss-engine create as a key file's parent 0x40000001.
const SRKAttributes = "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|noda|restricted|decrypt"

// KeyFile creates a key of algorithm alg (a tpm2_create -G value: ecc256, rsa2048...) under
// the standard SRK with tpm2-tools, as a user following the tpm2-openssl docs would, and
// writes it as a TSS2 key file, Dir/name.tss2, with tpm2_encodeobject. A non-empty auth
// becomes the key's auth value. It returns the file and the key's public half, as the TPM
// reported it, for a certificate.
func (t *TPM) KeyFile(name, alg, auth string) (string, crypto.PublicKey, error) {
	create := []string{"-C", "srk.ctx", "-G", alg, "-u", name + ".pub", "-r", name + ".priv", "-f", "pem", "-o", name + ".pem"}
	encode := []string{"-C", "srk.ctx", "-u", name + ".pub", "-r", name + ".priv", "-o", name + ".tss2"}
	if auth != "" {
		create = append(create, "-p", auth)
		encode = append(encode, "-p")
	}
	for _, args := range [][]string{
		{"createprimary", "-C", "o", "-G", "ecc", "-a", SRKAttributes, "-c", "srk.ctx"},
		append([]string{"create"}, create...),
		append([]string{"encodeobject"}, encode...),
	} {
		if _, err := t.Tool(args[0], args[1:]...); err != nil {
			return "", nil, err
		}
	}
	b, err := os.ReadFile(filepath.Join(t.Dir, name+".pem"))
	if err != nil {
		return "", nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return "", nil, fmt.Errorf("swtpm: tpm2_create wrote no PEM public key for %s", name)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return "", nil, fmt.Errorf("swtpm: public key of %s: %w", name, err)
	}
	return filepath.Join(t.Dir, name+".tss2"), pub, nil
}
