// Package slowh2 is an HTTP/2 client that never takes its answers: it opens a connection
// with a flow-control window of 0 and sends requests on it, as an attacker who wants a
// server to hold them does. Tests of servers that must give such clients up use it.
package slowh2

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Conn is one connection of the client. Its methods are safe for concurrent use.
type Conn struct {
	conn   *tls.Conn
	mu     sync.Mutex // serializes frame writes
	fr     *http2.Framer
	next   uint32
	closed chan struct{} // the server closed the connection (or sent GOAWAY)

	// Resets counts the streams the server reset; GoAway reports whether it sent GOAWAY.
	Resets atomic.Int64
	GoAway atomic.Bool
}

// Dial opens a connection to addr (TLS, ALPN h2, the certificate not verified) with a
// window of 0, and reads what the server sends, acknowledging its settings, until the
// test ends.
func Dial(t testing.TB, addr string, certs ...tls.Certificate) *Conn {
	t.Helper()
	d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, Certificates: certs}}
	nc, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("slowh2: dialing %s: %v", addr, err)
	}
	tc := nc.(*tls.Conn)
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("slowh2: %s negotiated %q, want h2", addr, p)
	}
	c := &Conn{conn: tc, fr: http2.NewFramer(tc, tc), next: 1, closed: make(chan struct{})}
	c.fr.SetMaxReadFrameSize(1 << 20)
	t.Cleanup(func() { _ = tc.Close() })
	if _, err := tc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	err = c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	c.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	go c.read()
	return c
}

func (c *Conn) read() {
	defer close(c.closed)
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.mu.Lock()
				_ = c.fr.WriteSettingsAck()
				c.mu.Unlock()
			}
		case *http2.RSTStreamFrame:
			c.Resets.Add(1)
		case *http2.GoAwayFrame:
			c.GoAway.Store(true)
		}
	}
}

// Closed is closed once the server closed the connection.
func (c *Conn) Closed() <-chan struct{} { return c.closed }

// Get sends a GET of path with fields header fields named x0, x1, ... with empty values,
// and extra, in CONTINUATION frames of 16 KiB. It returns the write error: the server may
// have closed the connection.
func (c *Conn) Get(path string, fields int, extra ...[2]string) error {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	enc.SetMaxDynamicTableSizeLimit(0) // every field literal, as the attack sends them
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "localhost"}, {":path", path}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for _, f := range extra {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for i := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x%d", i), Sensitive: true})
	}
	block := buf.Bytes()
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.next
	c.next += 2
	const chunk = 16 << 10
	first := block[:min(chunk, len(block))]
	block = block[len(first):]
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: true, EndHeaders: len(block) == 0}); err != nil {
		return err
	}
	for len(block) > 0 {
		part := block[:min(chunk, len(block))]
		block = block[len(part):]
		if err := c.fr.WriteContinuation(id, len(block) == 0, part); err != nil {
			return err
		}
	}
	return nil
}
