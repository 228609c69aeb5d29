package mvproxy

import (
	"bytes"
	"compress/gzip"
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
		c := newCapture()
		c.header.Set("Content-Encoding", encoding)
		_, _ = c.Write(body)
		got, err := c.decodedBody(limit)
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
			c := newCapture()
			c.header.Set("Content-Encoding", "gzip")
			_, _ = c.Write(buf.Bytes())
			if got, err := c.decodedBody(limit); err != nil || !bytes.Equal(got, body) {
				t.Fatalf("gzip round trip: %v", err)
			}
		}
	})
}
