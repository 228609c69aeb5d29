package reverseproxy

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzDecodedBody: whatever body and Content-Encoding a local handler answers with, the
// decoding returns no more than the limit, and gzip round-trips.
func FuzzDecodedBody(f *testing.F) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"kind":"APIGroupDiscoveryList"}`))
	_ = zw.Close()
	f.Add(gz.Bytes(), "gzip")
	f.Add([]byte(`{}`), "")
	f.Add([]byte{0x1f, 0x8b, 0x08}, "gzip")
	f.Add([]byte(`x`), "br")
	f.Fuzz(func(t *testing.T, body []byte, encoding string) {
		const limit = 1 << 10
		c := NewCapture()
		c.Header().Set("Content-Encoding", encoding)
		_, _ = c.Write(body)
		got, err := c.DecodedBody(limit)
		if err == nil && len(got) > limit {
			t.Fatalf("decoded %d bytes, limit %d", len(got), limit)
		}
		if encoding == "" && len(body) <= limit && (err != nil || !bytes.Equal(got, body)) {
			t.Fatalf("identity body changed: %v", err)
		}
		if encoding == "gzip" && len(body) <= limit {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write(body)
			_ = zw.Close()
			c := NewCapture()
			c.Header().Set("Content-Encoding", "gzip")
			_, _ = c.Write(buf.Bytes())
			if got, err := c.DecodedBody(limit); err != nil || !bytes.Equal(got, body) {
				t.Fatalf("gzip round trip: %v", err)
			}
		}
	})
}

func TestCaptureCopiesTheFirstCode(t *testing.T) {
	t.Parallel()
	c := NewCapture()
	c.Header().Set("ETag", `"x"`)
	c.WriteHeader(http.StatusForbidden)
	c.WriteHeader(http.StatusOK)
	_, _ = c.Write([]byte("no"))
	rec := httptest.NewRecorder()
	c.CopyTo(rec)
	if c.Code() != http.StatusForbidden || rec.Code != http.StatusForbidden || rec.Header().Get("ETag") != `"x"` || rec.Body.String() != "no" {
		t.Errorf("capture %d, copy %d %v %q", c.Code(), rec.Code, rec.Header(), rec.Body)
	}
}

func TestStatusRecorder(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	s := NewStatusRecorder(rec)
	if s.Code != http.StatusOK {
		t.Errorf("code before WriteHeader %d", s.Code)
	}
	s.WriteHeader(http.StatusBadGateway)
	if err := http.NewResponseController(s).Flush(); err != nil {
		t.Errorf("Flush through Unwrap: %v", err)
	}
	if s.Code != http.StatusBadGateway || rec.Code != http.StatusBadGateway || !rec.Flushed {
		t.Errorf("recorded %d, passed on %d, flushed %v", s.Code, rec.Code, rec.Flushed)
	}
}

func TestBufferPoolLends32KiB(t *testing.T) {
	t.Parallel()
	b := BufferPool.Get()
	if len(b) != 32<<10 {
		t.Errorf("buffer of %d bytes", len(b))
	}
	BufferPool.Put(b)
}
