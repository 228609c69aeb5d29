package keys_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kplug/kplug/keys"
)

func TestParseTPMURI(t *testing.T) {
	for _, tt := range []struct {
		uri  string
		want *keys.TPMURI
		err  string
	}{
		{uri: "tpm:handle=0x81000001",
			want: &keys.TPMURI{Handle: 0x81000001}},
		{uri: "tpm:handle=0X8100000a?device=/dev/tpm0&pin-source=file:/run/pin",
			want: &keys.TPMURI{Handle: 0x8100000a, Device: "/dev/tpm0", PINSource: "/run/pin"}},
		// A handle is hex, as TPM tools print it (I2 of the issue 30 review).
		{uri: "tpm:handle=2164260865", err: "tpm: handle=2164260865: want a persistent handle, 0x81000000 to 0x81FFFFFF"},
		{uri: "tpm:handle=0x8100_0001", err: "tpm: handle=0x8100_0001: want a persistent handle, 0x81000000 to 0x81FFFFFF"},
		{uri: "tpm:handle=0o20100000001", err: "tpm: handle=0o20100000001: want a persistent handle, 0x81000000 to 0x81FFFFFF"},
		{uri: "tpm:file=/etc/kplug/a%3Bb.tss2?pin-source=/run/pin",
			want: &keys.TPMURI{File: "/etc/kplug/a;b.tss2", PINSource: "/run/pin"}},
		{uri: "tpm:file=file:/k.tss2", want: &keys.TPMURI{File: "/k.tss2"}},
		{uri: "pkcs11:token=t", err: `tpm: "pkcs11:token=t" is not a tpm: URI`},
		{uri: "tpm:", err: `tpm: "tpm:" names no key: add file=PATH or a persistent handle=0x81NNNNNN`},
		{uri: "tpm:handle=0x81000001;file=/k", err: "tpm: give file= or handle=, not both"},
		{uri: "tpm:handle=0x40000001", err: "tpm: handle=0x40000001: want a persistent handle, 0x81000000 to 0x81FFFFFF"},
		{uri: "tpm:handle=alice", err: "tpm: handle=alice: want a persistent handle, 0x81000000 to 0x81FFFFFF"},
		{uri: "tpm:handle=0x81000001;handle=0x81000002", err: `tpm: attribute "handle" appears twice`},
		{uri: "tpm:object=alice", err: `tpm: unknown attribute "object"`},
		{uri: "tpm:handle=0x81000001?pin-value=1234", err: "tpm: pin-value is refused: keep the auth value out of the kubeconfig with pin-source=file:PATH or $KPLUG_TPM_PIN"},
		{uri: "tpm:handle=0x81000001?tcti=swtpm", err: `tpm: unknown query attribute "tcti"`},
		// A message never quotes the query, where a PIN may be.
		{uri: "tpm:handle?pin-value=1234", err: `tpm: attribute "handle" in "tpm:handle": want NAME=VALUE`},
		// Nor does it quote a query attribute, whatever its shape (F5 of the issue 30 review).
		{uri: "tpm:handle=0x81000001?pin-valueSECRETPIN", err: `tpm: a query attribute without '=' in "tpm:handle=0x81000001": want NAME=VALUE`},
		{uri: "tpm:handle=0x81000001?pin-value%3DSECRETPIN", err: `tpm: a query attribute without '=' in "tpm:handle=0x81000001": want NAME=VALUE`},
		{uri: "tpm:handle=0x81000001?pin-source=SECR%zzET", err: "tpm: attribute pin-source: a malformed percent-escape in its value"},
	} {
		got, err := keys.ParseTPMURI(tt.uri)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("ParseTPMURI(%q) = %v, want error %q", tt.uri, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseTPMURI(%q): %v", tt.uri, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseTPMURI(%q) (-want +got):\n%s", tt.uri, diff)
		}
	}
}

func FuzzParseTPMURI(f *testing.F) {
	f.Add("tpm:handle=0x81000001?device=/dev/tpmrm0&pin-source=file:/run/pin")
	f.Add("tpm:file=/k.tss2")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := keys.ParseTPMURI(s)
		if err == nil && (u.File == "") == (u.Handle == 0) {
			t.Errorf("ParseTPMURI(%q) = %+v: want exactly one of file and handle", s, u)
		}
	})
}
