package keys

import (
	"bytes"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
)

// tss2PEMType is the PEM block type of a TPM 2.0 key file (TCG "TPM 2.0 Key Files"; written
// by tpm2-openssl, tpm2-tss-engine, openssl_tpm2_engine and tpm2_encodeobject).
const tss2PEMType = "TSS2 PRIVATE KEY"

// Object identifiers of the key file's type (TCG OID arc 2.23.133.10.1).
var (
	oidLoadableKey   = asn1.ObjectIdentifier{2, 23, 133, 10, 1, 3}
	oidImportableKey = asn1.ObjectIdentifier{2, 23, 133, 10, 1, 4}
	oidSealedData    = asn1.ObjectIdentifier{2, 23, 133, 10, 1, 5}
)

// Parents a key file may name.
const (
	tpmOwnerHierarchy  = 0x40000001 // a primary key made from the standard SRK template
	tpmPersistentFirst = 0x81000000
	tpmPersistentLast  = 0x81FFFFFF
)

// tss2Key is a TPM 2.0 key file's body:
//
//	TPMKey ::= SEQUENCE {
//	  type        OBJECT IDENTIFIER,
//	  emptyAuth   [0] EXPLICIT BOOLEAN OPTIONAL,
//	  policy      [1] EXPLICIT SEQUENCE OF TPMPolicy OPTIONAL,
//	  secret      [2] EXPLICIT OCTET STRING OPTIONAL,
//	  authPolicy  [3] EXPLICIT SEQUENCE OF TPMAuthPolicy OPTIONAL,
//	  description [4] EXPLICIT UTF8String OPTIONAL,
//	  rsaParent   [5] EXPLICIT BOOLEAN OPTIONAL,
//	  parent      INTEGER,
//	  pubkey      OCTET STRING,  -- TPM2B_PUBLIC
//	  privkey     OCTET STRING   -- TPM2B_PRIVATE
//	}
//
// Fields [3] to [5] come from later revisions; they are parsed so that such a file is
// refused for what it asks (a policy) rather than as malformed. emptyAuth is read as BER
// rather than DER since tpm2_encodeobject (tpm2-tools 5.4) writes TRUE as 0x01, which
// encoding/asn1 refuses as a bool; only DER TRUE (0xFF) is relied on, since that tool also
// writes the flag inverted (see emptyAuthTrue and openTPM).
type tss2Key struct {
	Type        asn1.ObjectIdentifier
	EmptyAuth   asn1.RawValue `asn1:"optional,explicit,tag:0"`
	Policy      asn1.RawValue `asn1:"optional,explicit,tag:1"`
	Secret      asn1.RawValue `asn1:"optional,explicit,tag:2"`
	AuthPolicy  asn1.RawValue `asn1:"optional,explicit,tag:3"`
	Description string        `asn1:"optional,explicit,tag:4,utf8"`
	RSAParent   bool          `asn1:"optional,explicit,tag:5"`
	Parent      int64
	PubKey      []byte
	PrivKey     []byte
}

// isTSS2KeyFile reports whether b starts with a TSS2 PRIVATE KEY PEM block, so that Open can
// send a TPM key file to the TPM whichever way it was named.
func isTSS2KeyFile(b []byte) bool {
	block, _ := pem.Decode(b)
	return block != nil && block.Type == tss2PEMType
}

// parseTSS2KeyFile parses the first PEM block of b as a loadable TPM 2.0 key and checks
// that kplug can use it: no policy, no imported secret, a parent it knows how to load.
func parseTSS2KeyFile(b []byte) (*tss2Key, error) {
	block, rest := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("malformed TPM key file: something follows the PEM block")
	}
	if block.Type != tss2PEMType {
		return nil, fmt.Errorf("PEM block %q: want %q", block.Type, tss2PEMType)
	}
	var k tss2Key
	rest, err := asn1.Unmarshal(block.Bytes, &k)
	if err != nil {
		return nil, fmt.Errorf("malformed TPM key: %w", err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("malformed TPM key: %d bytes after it", len(rest))
	}
	if len(k.EmptyAuth.FullBytes) != 0 {
		// encoding/asn1 hands a RawValue over with its explicit tag; the boolean is inside.
		var b asn1.RawValue
		if rest, err := asn1.Unmarshal(k.EmptyAuth.Bytes, &b); err != nil || len(rest) != 0 || b.Class != asn1.ClassUniversal || b.Tag != asn1.TagBoolean || len(b.Bytes) != 1 {
			return nil, errors.New("malformed TPM key: emptyAuth is not a boolean")
		}
		k.EmptyAuth = b
	}
	switch {
	case k.Type.Equal(oidLoadableKey):
	case k.Type.Equal(oidImportableKey):
		return nil, errors.New("an importable key (not yet bound to this TPM) is not supported: import it with tpm2_import and use the loadable key it gives")
	case k.Type.Equal(oidSealedData):
		return nil, errors.New("sealed data is not a signing key")
	default:
		return nil, fmt.Errorf("unknown TPM key type %v: want a loadable key (%v)", k.Type, oidLoadableKey)
	}
	switch {
	case len(k.Policy.FullBytes) != 0 || len(k.AuthPolicy.FullBytes) != 0:
		return nil, errors.New("keys with a policy are not supported: create the key without one (an auth value is supported)")
	case len(k.Secret.FullBytes) != 0:
		return nil, errors.New("keys with an imported secret are not supported")
	case k.RSAParent:
		return nil, errors.New("keys under an RSA primary (rsaParent) are not supported: use an ECC parent")
	case k.Parent != tpmOwnerHierarchy && (k.Parent < tpmPersistentFirst || k.Parent > tpmPersistentLast):
		return nil, fmt.Errorf("parent 0x%x is not supported: want 0x%x (the owner hierarchy's standard SRK) or a persistent handle (0x81000000 to 0x81FFFFFF)", k.Parent, tpmOwnerHierarchy)
	case len(k.PubKey) == 0 || len(k.PrivKey) == 0:
		return nil, errors.New("malformed TPM key: no public or private part")
	case !isTPM2B(k.PubKey) || !isTPM2B(k.PrivKey):
		return nil, errors.New("malformed TPM key: its public or private part is not one sized TPM2B (bytes missing or after it)")
	}
	return &k, nil
}

// isTPM2B reports whether b is exactly one TPM2B: a big-endian 16-bit size and that many
// bytes, nothing after.
func isTPM2B(b []byte) bool {
	return len(b) >= 2 && int(binary.BigEndian.Uint16(b)) == len(b)-2
}

// emptyAuthTrue reports whether the key file says, in DER, that the key's auth value is
// empty: TRUE encoded as 0xFF, as tpm2-openssl and tpm2-tss-engine write it. tpm2_encodeobject
// of tpm2-tools 5.4 writes 0x01 (not DER) and inverts the flag, so 0x01 says nothing.
func (k *tss2Key) emptyAuthTrue() bool {
	return len(k.EmptyAuth.Bytes) == 1 && k.EmptyAuth.Bytes[0] == 0xFF
}
