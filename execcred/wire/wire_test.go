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
