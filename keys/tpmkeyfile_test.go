package keys

import (
	"encoding/asn1"
	"encoding/pem"
	"testing"
)

// tss2File encodes a key file body; fields left nil are left out.
func tss2File(t testing.TB, body any) []byte {
	t.Helper()
	der, err := asn1.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: tss2PEMType, Bytes: der})
}

func TestParseTSS2KeyFile(t *testing.T) {
	type minimal struct {
		Type      asn1.ObjectIdentifier
		Parent    int64
		Pub, Priv []byte
	}
	type withAuth struct {
		Type      asn1.ObjectIdentifier
		EmptyAuth asn1.RawValue // with its [0] tag: Marshal drops a RawValue's tag option
		Parent    int64
		Pub, Priv []byte
	}
	type withPolicy struct {
		Type      asn1.ObjectIdentifier
		Policy    []int `asn1:"explicit,tag:1"`
		Parent    int64
		Pub, Priv []byte
	}
	explicit0 := func(inner []byte) asn1.RawValue {
		return asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: inner}
	}
	berTrue := explicit0([]byte{asn1.TagBoolean, 1, 1})
	pub, priv := []byte{0, 1, 2}, []byte{0, 1, 3}
	for _, tc := range []struct {
		name string
		in   []byte
		want string // error; "" for none
	}{
		{"owner parent", tss2File(t, minimal{oidLoadableKey, 0x40000001, pub, priv}), ""},
		{"persistent parent", tss2File(t, minimal{oidLoadableKey, 0x81000001, pub, priv}), ""},
		{"emptyAuth as tpm2-tools writes it", tss2File(t, withAuth{oidLoadableKey, berTrue, 0x40000001, pub, priv}), ""},
		{"emptyAuth not a boolean", tss2File(t, withAuth{oidLoadableKey, explicit0([]byte{asn1.TagInteger, 1, 1}), 0x40000001, pub, priv}), "malformed TPM key: emptyAuth is not a boolean"},
		{"policy", tss2File(t, withPolicy{oidLoadableKey, []int{1}, 0x40000001, pub, priv}), "keys with a policy are not supported: create the key without one (an auth value is supported)"},
		{"importable", tss2File(t, minimal{oidImportableKey, 0x40000001, pub, priv}), "an importable key (not yet bound to this TPM) is not supported: import it with tpm2_import and use the loadable key it gives"},
		{"sealed", tss2File(t, minimal{oidSealedData, 0x40000001, pub, priv}), "sealed data is not a signing key"},
		{"endorsement parent", tss2File(t, minimal{oidLoadableKey, 0x4000000B, pub, priv}), "parent 0x4000000b is not supported: want 0x40000001 (the owner hierarchy's standard SRK) or a persistent handle (0x81000000 to 0x81FFFFFF)"},
		{"no private part", tss2File(t, minimal{oidLoadableKey, 0x40000001, pub, nil}), "malformed TPM key: no public or private part"},
		{"other PEM", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{0}}), `PEM block "PRIVATE KEY": want "TSS2 PRIVATE KEY"`},
		{"not PEM", []byte("hello"), "no PEM block"},
		{"trailing data", trailing(t, minimal{oidLoadableKey, 0x40000001, pub, priv}), "malformed TPM key: 1 bytes after it"},
		// I1 of the issue 30 review: nothing may follow the PEM block or a part.
		{"after the PEM block", append(tss2File(t, minimal{oidLoadableKey, 0x40000001, pub, priv}), "x"...), "malformed TPM key file: something follows the PEM block"},
		{"after the public part", tss2File(t, minimal{oidLoadableKey, 0x40000001, append(pub, 9), priv}), "malformed TPM key: its public or private part is not one sized TPM2B (bytes missing or after it)"},
		{"short private part", tss2File(t, minimal{oidLoadableKey, 0x40000001, pub, []byte{0, 5, 1}}), "malformed TPM key: its public or private part is not one sized TPM2B (bytes missing or after it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseTSS2KeyFile(append(tc.in, "\n"...)) // a newline after the block is fine
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("parseTSS2KeyFile = %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("parseTSS2KeyFile = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestTSS2EmptyAuth is F2 of the issue 30 review: only DER TRUE (0xFF) says the auth value
// is empty; tpm2-tools 5.4's 0x01 and FALSE say nothing kplug relies on.
func TestTSS2EmptyAuth(t *testing.T) {
	type withAuth struct {
		Type      asn1.ObjectIdentifier
		EmptyAuth asn1.RawValue
		Parent    int64
		Pub, Priv []byte
	}
	for v, want := range map[byte]bool{0xFF: true, 0x01: false, 0x00: false} {
		raw := asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: []byte{asn1.TagBoolean, 1, v}}
		k, err := parseTSS2KeyFile(tss2File(t, withAuth{oidLoadableKey, raw, 0x40000001, []byte{0, 1, 2}, []byte{0, 1, 3}}))
		if err != nil {
			t.Fatal(err)
		}
		if got := k.emptyAuthTrue(); got != want {
			t.Errorf("emptyAuth 0x%02x: emptyAuthTrue() = %v, want %v", v, got, want)
		}
	}
}

// trailing is body as a key file with a byte after its DER.
func trailing(t testing.TB, body any) []byte {
	der, err := asn1.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: tss2PEMType, Bytes: append(der, 0)})
}

func FuzzParseTSS2KeyFile(f *testing.F) {
	f.Add(tss2File(f, struct {
		Type      asn1.ObjectIdentifier
		EmptyAuth bool `asn1:"explicit,tag:0"`
		Parent    int64
		Pub, Priv []byte
	}{oidLoadableKey, true, 0x40000001, []byte{1}, []byte{2}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := parseTSS2KeyFile(b)
		if err == nil && (len(k.PubKey) == 0 || len(k.PrivKey) == 0) {
			t.Errorf("accepted a key file without its parts: %+v", k)
		}
	})
}
