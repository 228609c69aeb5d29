package httpsig

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// reservations records what a BodyReserver is asked for.
type reservations struct {
	io.ReadCloser
	asked []int64
}

func (r *reservations) Reserve(n int64) error { r.asked = append(r.asked, n); return nil }

// TestBodyReservedByChunk: a body is reserved a chunk at a time as it is read, the first
// no larger than the Content-Length leaves, so that an announced length costs nothing
// until the bytes come.
func TestBodyReservedByChunk(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		length int64
		body   string
		want   []int64
	}{
		{"small, length known", 5, "hello", []int64{6}},
		{"two chunks and a byte, length known", 2*bodyChunk + 1, strings.Repeat("x", 2*bodyChunk+1), []int64{bodyChunk, bodyChunk, 2}},
		{"length unknown", 0, "hello", []int64{bodyChunk}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &reservations{ReadCloser: io.NopCloser(strings.NewReader(tc.body))}
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "https://example.com/", nil)
			req.Body, req.ContentLength = r, tc.length
			b, err := readBody(req)
			if err != nil || b.size != int64(len(tc.body)) {
				t.Fatalf("%v, %d bytes", err, b.size)
			}
			if len(r.asked) != len(tc.want) {
				t.Fatalf("reserved %v, want %v", r.asked, tc.want)
			}
			for i := range tc.want {
				if r.asked[i] != tc.want[i] {
					t.Errorf("reserved %v, want %v", r.asked, tc.want)
				}
			}
			got, _ := io.ReadAll(req.Body)
			if string(got) != tc.body {
				t.Errorf("read back %d bytes, want %d", len(got), len(tc.body))
			}
		})
	}
}

// TestReleaseBody: once released, a buffered body's bytes go as soon as no reader is
// midway through it; a reader midway (a transport still sending) reads on to the end,
// and GetBody fails.
func TestReleaseBody(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("x", bodyChunk+10)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "https://example.com/", strings.NewReader(body))
	b, err := readBody(req)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 10)
	if _, err := io.ReadFull(req.Body, first); err != nil {
		t.Fatal(err)
	}
	ReleaseBody(req.Body)
	if _, err := req.GetBody(); !errors.Is(err, errBodyReleased) {
		t.Errorf("GetBody after release: %v", err)
	}
	rest, err := io.ReadAll(req.Body)
	if err != nil || len(first)+len(rest) != len(body) {
		t.Errorf("the reader midway read %d more bytes, %v; want the rest", len(rest), err)
	}
	if b.chunks != nil {
		t.Error("the bytes are still held once the last reader is done")
	}
}
