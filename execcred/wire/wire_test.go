package wire_test

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/execcred/wire"
)

// TestTimeAsMetav1: Time reads and writes what metav1.Time, the type client-go decodes
// expirationTimestamp into, reads and writes.
func TestTimeAsMetav1(t *testing.T) {
	t.Parallel()
	for _, tm := range []time.Time{
		{},
		time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		time.Date(2030, 1, 2, 3, 4, 5, 999_999_999, time.FixedZone("x", 3600)),
	} {
		got, err := json.Marshal(wire.NewTime(tm))
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(metav1.NewTime(tm))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("marshal %v: %s, metav1 %s", tm, got, want)
		}
	}
	for _, in := range []string{`null`, `"2030-01-02T03:04:05Z"`, `"2030-01-02T03:04:05+01:00"`, `"2030-01-02T03:04:05.5Z"`, `"tomorrow"`, `42`} {
		var got wire.Time
		gotErr := json.Unmarshal([]byte(in), &got)
		var want metav1.Time
		wantErr := json.Unmarshal([]byte(in), &want)
		if (gotErr != nil) != (wantErr != nil) || !got.Equal(want.Time) {
			t.Errorf("unmarshal %s: %v, %v; metav1 %v, %v", in, got, gotErr, want, wantErr)
		}
	}
}

// TestInfoRoundTrip: what Encode writes, LoadInfo reads back, for every version.
func TestInfoRoundTrip(t *testing.T) {
	t.Parallel()
	for _, in := range []wire.Info{
		{APIVersion: wire.V1, Interactive: true, Cluster: &wire.Cluster{Server: "https://k:6443", Config: json.RawMessage(`{"a":1}`)}, LockFilePath: "/run/x.lock"},
		{APIVersion: wire.V1beta1},
		{APIVersion: wire.V1alpha1, Interactive: true, Response: &wire.Response{Code: 401, Header: map[string][]string{"A": {"b"}}}},
		{APIVersion: wire.V1, HTTPSignature: &wire.HTTPSignatureRequest{Algorithm: "ed25519", SignedHeaders: []wire.HTTPSignatureHeader{{Name: "X-K8s-Audience"}}}},
		{APIVersion: wire.V1alpha1, HTTPSignature: &wire.HTTPSignatureRequest{SignedHeaders: []wire.HTTPSignatureHeader{{Name: "X-K8s-Audience"}}}},
	} {
		b, err := in.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.LoadInfo(string(b))
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		in.FromClient = true
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(in)
		if string(gb) != string(wb) {
			t.Errorf("round trip of %s:\n got %s\nwant %s", b, gb, wb)
		}
	}
}

// TestHTTPSignatureSpec: spec.httpSignature is sent as the KEP's prototype writes it,
// algorithm left out when the key decides.
func TestHTTPSignatureSpec(t *testing.T) {
	t.Parallel()
	b, err := (&wire.Info{APIVersion: wire.V1, HTTPSignature: &wire.HTTPSignatureRequest{
		SignedHeaders: []wire.HTTPSignatureHeader{{Name: "X-K8s-Audience"}},
	}}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{"interactive":false,"httpSignature":{"signedHeaders":[{"name":"X-K8s-Audience"}]}}}` + "\n"
	if string(b) != want {
		t.Errorf("Encode:\n got %s\nwant %s", b, want)
	}
}

// TestHTTPSignatureStatus: what Decode accepts and refuses of status.httpSignature, and
// that it is a known field, not one of Unknown.
func TestHTTPSignatureStatus(t *testing.T) {
	t.Parallel()
	const key = `"privateKey":"-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n"`
	for _, tc := range []struct{ status, err string }{
		{`{"httpSignature":{"keyID":"k",` + key + `,"signedHeaders":{"X-K8s-Audience":"a"}}}`, ""},
		{`{"httpSignature":{"certificate":"c",` + key + `}}`, ""},
		{`{"httpSignature":{"keyID":"k","secret":"s"}}`, ""},
		{`{"httpSignature":{"keyID":"k","secretBase64":"cw=="}}`, ""},
		{`{"token":"t","httpSignature":{"keyID":"k","secret":"s"}}`, "exec plugin returned httpSignature together with a token, client certificate or proxyConfig: a status may carry a signature or a credential that transits, never both"},
		{`{"clientCertificateData":"c","clientKeyData":"k","httpSignature":{"keyID":"k","secret":"s"}}`, "exec plugin returned httpSignature together with a token, client certificate or proxyConfig: a status may carry a signature or a credential that transits, never both"},
		{`{"httpSignature":{"keyID":"k","secret":"s","stage":{"scope":{"region":"r"}}}}`, ""},
		{`{"httpSignature":{"keyID":"k","secret":"s","stage":{"from":"day","scope":{"region":"r"}}}}`, ""},
		{`{"httpSignature":{"keyID":"k",` + key + `,"stage":{"scope":{"region":"r"}}}}`, "exec plugin returned httpSignature.stage with a privateKey: a stage places a shared secret on a key derivation ladder"},
		{`{"httpSignature":{"keyID":"k","secret":"s","stage":{"form":"day"}}}`, `exec plugin returned a malformed httpSignature.stage: json: unknown field "form"`},
		{`{"httpSignature":{"keyID":"k"}}`, "exec plugin returned httpSignature with 0 of privateKey, secret and secretBase64: exactly one must be set"},
		{`{"httpSignature":{"keyID":"k","secret":"s",` + key + `}}`, "exec plugin returned httpSignature with 2 of privateKey, secret and secretBase64: exactly one must be set"},
		{`{"httpSignature":{"certificate":"c","secret":"s"}}`, "exec plugin returned httpSignature.certificate without privateKey: a certificate identifies an asymmetric key"},
		{`{"httpSignature":{"certificate":"c","keyID":"k",` + key + `}}`, "exec plugin returned httpSignature with both certificate and keyID: a certificate key's keyid is the certificate's digest"},
		{`{"httpSignature":{` + key + `}}`, "exec plugin returned httpSignature without keyID: a key without a certificate needs the name the server knows it by"},
		{`{"httpSignature":{"keyID":"k","secret":"s","signedHeaders":{"":"v"}}}`, "exec plugin returned httpSignature.signedHeaders with an empty header name"},
	} {
		out := `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":` + tc.status + `}`
		s, err := wire.Decode(wire.V1, []byte(out))
		if got := errString(err); got != tc.err {
			t.Errorf("%s:\n got error %q\nwant %q", tc.status, got, tc.err)
		}
		if err == nil && (s.HTTPSignature == nil || len(s.Unknown) != 0) {
			t.Errorf("%s: httpSignature %+v, unknown %v", tc.status, s.HTTPSignature, s.Unknown)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestUnstorable: the one rule by which `kplug exec-cache` and the plugin SDK's Cache keep
// key material out of storage, on decoded answers.
func TestUnstorable(t *testing.T) {
	t.Parallel()
	for status, want := range map[string]string{
		`{"token":"t","expirationTimestamp":"2030-01-01T00:00:00Z"}`:                                                                   "",
		`{"clientCertificateData":"c","clientKeyData":"k"}`:                                                                            "",
		`{"httpSignature":{"keyID":"k","secret":"s"}}`:                                                                                 "it carries signing material (status.httpSignature): keys are never written down",
		`{"clientCertificateData":"c","clientKeyData":"k","proxyConfig":{"url":"unix:///p.sock","certificate-authority-data":"Q0E="}}`: "it is an exec proxy answer: it points to a running proxy",
		`{"token":"t","signingKey":"k","zeta":1}`:                                                                                      "it has status fields this cache does not know, which may hold keys: signingKey, zeta",
	} {
		s, err := wire.Parse(wire.V1, []byte(`{"apiVersion":"client.authentication.k8s.io/v1","status":`+status+`}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Unstorable(); got != want {
			t.Errorf("%s: Unstorable() = %q, want %q", status, got, want)
		}
	}
	if got := (&wire.Info{APIVersion: wire.V1}).Uncached(); got != "" {
		t.Errorf("a client that does not sign: Uncached() = %q", got)
	}
	if got := (&wire.Info{APIVersion: wire.V1, HTTPSignature: &wire.HTTPSignatureRequest{}}).Uncached(); got == "" {
		t.Error("a client that asks for signing material: Uncached() is empty")
	}
}
