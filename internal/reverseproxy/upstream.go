package reverseproxy

import (
	"crypto/tls"
	"net/http"
	"time"
)

// UpstreamTransport forwards to servers that speak HTTP/2 (kube-apiserver, the mixed
// version proxy's peers) over HTTP/2, and requests that upgrade (exec, attach,
// port-forward over SPDY or WebSocket) over HTTP/1.1, since Go's HTTP/2 client cannot
// carry an upgrade. Over HTTP/2 a watch is a stream of a shared connection rather than a
// connection of its own, with its buffers and goroutines. A server that does not offer
// h2 gets HTTP/1.1 for everything. Both halves verify servers and present client
// certificates with the same TLS configuration.
//
// One connection now carries many requests, so a server that stops answering without
// closing it (hung, or its machine gone) must be noticed: a connection that receives
// nothing for twice the timeout is pinged, and closed if the ping is not answered within
// the timeout; its requests then fail, and the proxies answer 503, as for a connection
// refused.
//
// It is safe for concurrent use.
type UpstreamTransport struct {
	h2, h1 *http.Transport
}

// NewUpstreamTransport returns an UpstreamTransport that verifies servers and presents
// the proxy's client certificate with c (not modified; each half has a copy); timeout
// bounds dialling and the TLS handshake each, and sets the health check above.
func NewUpstreamTransport(c *tls.Config, timeout time.Duration) *UpstreamTransport {
	h2 := HTTP1Transport(c.Clone(), timeout)
	h2.Protocols = new(http.Protocols)
	h2.Protocols.SetHTTP1(true) // a server that offers only HTTP/1.1
	h2.Protocols.SetHTTP2(true)
	h2.HTTP2 = &http.HTTP2Config{
		SendPingTimeout: 2 * timeout,
		PingTimeout:     timeout,
		// The window a stream's response may fill before the proxy's client reads it:
		// what the listener grants its own clients (NewServer). Go's default, 4 MiB,
		// would let each watch a client does not read hold 4 MiB of the proxy's memory
		// where over HTTP/1.1 the kernel's socket buffers held it.
		MaxReceiveBufferPerStream: http2Window,
	}
	return &UpstreamTransport{h2: h2, h1: HTTP1Transport(c.Clone(), timeout)}
}

// RoundTrip sends req over HTTP/1.1 when it upgrades (IsUpgrade) or its header block is
// large (h1HeaderList), over HTTP/2 otherwise. httputil.ReverseProxy keeps Connection:
// Upgrade on the request it forwards only when the client's request names a protocol in
// Upgrade, so what it forwards is what decides.
func (t *UpstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if IsUpgrade(req) || headerListSize(req.Header) > h1HeaderList {
		return t.h1.RoundTrip(req)
	}
	return t.h2.RoundTrip(req)
}

// h1HeaderList is the HTTP/2 header list size (RFC 9113 §6.5.2: each field's name and
// value and 32 bytes) above which a request goes over HTTP/1.1. HTTP/2 counts 32 bytes
// more per field than HTTP/1.1 does against a server's limit (kube-apiserver's is 1 MiB),
// so a block the server accepts over HTTP/1.1 could be refused over HTTP/2 by Go's
// client, and the proxy would answer 503 for a server that is up (issue 33 review 2, P1).
// Over HTTP/1.1 the server's own limit decides, as before HTTP/2. Clients' header blocks
// are a few KiB.
const h1HeaderList = 64 << 10

// headerListSize is h's HTTP/2 header list size, pseudo-headers aside.
func headerListSize(h http.Header) int {
	n := 0
	for name, values := range h {
		for _, v := range values {
			n += len(name) + len(v) + 32
		}
	}
	return n
}

// CloseIdleConnections closes the idle connections of both halves.
func (t *UpstreamTransport) CloseIdleConnections() {
	t.h2.CloseIdleConnections()
	t.h1.CloseIdleConnections()
}
