package keys_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kplug/kplug/keys"
)

func TestParsePKCS11URI(t *testing.T) {
	for _, tt := range []struct {
		uri  string
		want *keys.PKCS11URI
		err  string
	}{
		{uri: "pkcs11:token=kplug;object=alice",
			want: &keys.PKCS11URI{Token: "kplug", Object: "alice"}},
		{uri: "pkcs11:token=My%20Token;id=%01%02;type=private?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/run/pin",
			want: &keys.PKCS11URI{Token: "My Token", ID: []byte{1, 2}, ModulePath: "/usr/lib/softhsm/libsofthsm2.so", PINSource: "/run/pin"}},
		{uri: "pkcs11:serial=0123abcd;object=k?pin-source=/run/pin",
			want: &keys.PKCS11URI{Serial: "0123abcd", Object: "k", PINSource: "/run/pin"}},
		{uri: "file:/k.pem", err: `pkcs11: "file:/k.pem" is not a pkcs11: URI`},
		{uri: "pkcs11:token=t", err: `pkcs11: "pkcs11:token=t" names no key: add object=LABEL or id=`},
		{uri: "pkcs11:token=t;serial=s;object=o", err: "pkcs11: give token= or serial=, not both"},
		{uri: "pkcs11:token=t;object=o;object=p", err: `pkcs11: attribute "object" appears twice`},
		{uri: "pkcs11:token=t;object=o;type=public", err: "pkcs11: type=public: the key URI must name a private key"},
		{uri: "pkcs11:token=t;object", err: `pkcs11: attribute "object" in "pkcs11:token=t;object": want NAME=VALUE`},
		{uri: "pkcs11:token=t;object=%zz", err: "pkcs11: attribute object: a malformed percent-escape in its value"},
		{uri: "pkcs11:token=t;slot-id=1;object=o", err: `pkcs11: attribute "slot-id" is not supported; select the token with token= or serial=`},
		{uri: "pkcs11:token=t;object=o?pin-value=1234", err: "pkcs11: pin-value is refused: keep the PIN out of the kubeconfig with pin-source=file:PATH or $KPLUG_PKCS11_PIN"},
		{uri: "pkcs11:token=t;object=o?max-sessions=2", err: `pkcs11: unknown query attribute "max-sessions"`},
		// A message never quotes the query, where a PIN may be.
		{uri: "pkcs11:token=t;object?pin-value=1234", err: `pkcs11: attribute "object" in "pkcs11:token=t;object": want NAME=VALUE`},
	} {
		got, err := keys.ParsePKCS11URI(tt.uri)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("ParsePKCS11URI(%q) = %v, want error %q", tt.uri, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParsePKCS11URI(%q): %v", tt.uri, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParsePKCS11URI(%q) (-want +got):\n%s", tt.uri, diff)
		}
	}
}

func FuzzParsePKCS11URI(f *testing.F) {
	f.Add("pkcs11:token=kplug;object=alice?module-path=/m.so&pin-source=file:/p")
	f.Add("pkcs11:serial=1;id=%01")
	f.Add("pkcs11:;;?&&")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := keys.ParsePKCS11URI(s)
		if err != nil {
			if u != nil {
				t.Errorf("ParsePKCS11URI(%q) returned both %+v and %v", s, u, err)
			}
			return
		}
		if !strings.HasPrefix(s, "pkcs11:") || (u.Token == "") == (u.Serial == "") || (u.Object == "" && len(u.ID) == 0) {
			t.Errorf("ParsePKCS11URI(%q) accepted %+v", s, u)
		}
	})
}
