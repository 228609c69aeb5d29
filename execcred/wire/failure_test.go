package wire_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/execcred/wire"
)

// TestParseFailure (issue 28, kubernetes/kubernetes#139150): what a failing plugin's stdout
// must be for a client to show its message, and why other output is not; no error quotes
// the output.
func TestParseFailure(t *testing.T) {
	t.Parallel()
	// status builds a metav1.Status whose whole encoding is size bytes, message padded.
	status := func(size int) string {
		s := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"` + `"}`
		return s[:len(s)-2] + strings.Repeat("m", size-len(s)) + `"}`
	}
	tests := []struct {
		name, stdout string
		want         *wire.Failure
		wantErr      string
	}{
		{"as the API server writes it", `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"session expired","reason":"Unauthorized","code":401}`,
			&wire.Failure{Message: "session expired", Reason: "Unauthorized", Code: 401}, ""},
		{"white space around", "\n  {\"kind\":\"Status\",\"message\":\"m\"}\r\n\t", &wire.Failure{Message: "m"}, ""},
		{"unknown fields and any apiVersion", `{"kind":"Status","apiVersion":"meta.k8s.io/v1","message":"m","details":{"name":"x"},"extra":1}`, &wire.Failure{Message: "m"}, ""},
		{"1 MiB", status(wire.MaxFailureSize), &wire.Failure{Message: strings.Repeat("m", wire.MaxFailureSize-len(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":""}`))}, ""},
		{"more than 1 MiB", status(wire.MaxFailureSize + 1), nil, "1048577 bytes of output, more than the 1048576 a status may have"},
		{"empty", " \n", nil, "no output"},
		{"text", "token expired\n", nil, "not a JSON object"},
		{"array", `[{"kind":"Status","message":"m"}]`, nil, "not a JSON object"},
		{"broken JSON", `{"kind":"Status","message":"secret-tok`, nil, "not a metav1.Status: it does not decode"},
		{"wrong type", `{"kind":"Status","message":"m","code":"401"}`, nil, "not a metav1.Status: it does not decode"},
		{"two objects", `{"kind":"Status","message":"a"}{"kind":"Status","message":"b"}`, nil, "unexpected data after the status object"},
		{"no kind", `{"apiVersion":"v1","status":"Failure","message":"m"}`, nil, `not a metav1.Status: kind is not "Status"`},
		{"an ExecCredential", `{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"token":"secret-tok"}}`, nil, "not a metav1.Status: it does not decode"},
		{"an ExecCredential with no status", `{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","message":"m"}`, nil, `not a metav1.Status: kind is not "Status"`},
		{"kind in another case", `{"Kind":"Status","message":"m"}`, nil, `not a metav1.Status: kind is not "Status"`},
		{"no message", `{"kind":"Status","status":"Failure","reason":"Unauthorized"}`, nil, "the status has no message"},
		{"blank message", `{"kind":"Status","message":" \n"}`, nil, "the status has no message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := wire.ParseFailure([]byte(tt.stdout))
			if errString(err) != tt.wantErr {
				t.Fatalf("error %q, want %q", errString(err), tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("failure (-want +got):\n%s", diff)
			}
		})
	}
}

// A plugin writes a metav1.Status as the API machinery does, and it reads back.
func TestFailureEncode(t *testing.T) {
	t.Parallel()
	f := &wire.Failure{Message: "run `my-login` <first>", Reason: "Unauthorized", Code: 401}
	out, err := f.Encode()
	want := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"run ` + "`my-login`" + ` \u003cfirst\u003e","reason":"Unauthorized","code":401}` + "\n"
	if err != nil || string(out) != want {
		t.Fatalf("Encode = %s, %v\nwant %s", out, err, want)
	}
	back, err := wire.ParseFailure(out)
	if err != nil || *back != *f {
		t.Fatalf("ParseFailure(Encode) = %+v, %v", back, err)
	}
	if out, _ := (&wire.Failure{Message: "m"}).Encode(); string(out) != `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m"}`+"\n" {
		t.Errorf("without reason and code: %s", out)
	}
}

// The same bytes mean the same to the API machinery: what a plugin writes decodes as a
// metav1.Status, and a metav1.Status as client-go encodes it is a Failure.
func TestFailureAsMetav1(t *testing.T) {
	t.Parallel()
	out, err := (&wire.Failure{Message: "m", Reason: "Forbidden", Code: 403}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	var s metav1.Status
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatal(err)
	}
	want := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Message: "m", Reason: metav1.StatusReasonForbidden, Code: 403}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("as metav1.Status (-want +got):\n%s", diff)
	}
	theirs, err := json.Marshal(&want)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := wire.ParseFailure(theirs); err != nil || *f != (wire.Failure{Message: "m", Reason: "Forbidden", Code: 403}) {
		t.Errorf("ParseFailure(%s) = %+v, %v", theirs, f, err)
	}
}

// FuzzParseFailure: no output panics the parser; what it accepts has a message and
// survives a round trip.
func FuzzParseFailure(f *testing.F) {
	for _, seed := range []string{
		`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","reason":"Unauthorized","code":401}`,
		`{"kind":"Status","message":""}`, `{"kind":"Status","message":"a"} x`, `{}`, `[]`, " ", `{"kind":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		got, err := wire.ParseFailure(out)
		if err != nil {
			return
		}
		if strings.TrimSpace(got.Message) == "" {
			t.Fatalf("accepted %q without a message", out)
		}
		enc, err := got.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if again, err := wire.ParseFailure(enc); err != nil || *again != *got {
			t.Fatalf("%q: round trip gave %+v, %v; want %+v", out, again, err, got)
		}
	})
}
