package verifier

import (
	"net/http"
	"time"

	"github.com/kplug/kplug/internal/reverseproxy"
)

// The signature proxy's server limits, tighter than kube-apiserver's
// (reverseproxy.NewServer): its clients are anyone on the network until their first
// request authenticates, and what they can make it hold must stay small. What a client
// that has not authenticated costs, at most, is in docs/http-signatures.md ("Limits").
const (
	// DefaultMaxHeaderBytes bounds a request's header (HTTP/1.1: the request line and
	// header lines; HTTP/2: the header list, where each field costs 32 bytes more than its
	// name and value). A signed request needs a few KiB: the certificate (at most 16 KiB,
	// httpsig's own bound) and the signature fields; then come the impersonation headers,
	// one Impersonate-Group line per group. 64 KiB takes 600 groups of names up to 40
	// bytes (a GUID is 36) beside a certificate of a few KiB, over HTTP/2; 32 KiB, the
	// default before, took fewer than 600 of any name over HTTP/2. Memory follows field
	// count more than bytes (Go keeps some 125 bytes a field): 1 MiB of empty header lines
	// held 19 MiB. The count of values is kube-apiserver's (reverseproxy.MaxHeaderValues),
	// which these bytes reach first.
	DefaultMaxHeaderBytes = 64 << 10
	// handshakeTimeout bounds a connection's TLS handshake, and the reading of each
	// request's header (Go derives the first from the second): client-go gives up on a
	// handshake after 10 s.
	handshakeTimeout = 10 * time.Second
	// HTTP/2 frames are read at most 16 KiB at a time (the protocol's default; a larger
	// frame saves nothing worth a larger read buffer on every connection), and a client
	// may send 256 KiB of a request's body, and 512 KiB across its requests, before the
	// proxy reads them: that much a client that has not authenticated can have buffered,
	// per connection, while its requests are refused.
	maxFrameSize        = 16 << 10
	streamReceiveWindow = 256 << 10
	connReceiveWindow   = 512 << 10
	// unauthenticatedHeaderBudget bounds the headers of requests being checked or refused
	// at once, across connections, in header list size (Go holds about four times that).
	unauthenticatedHeaderBudget = 16 << 20
)

// admission is the connection policy of a Proxy (see conns.go): MaxConnections in all, a
// quarter of them unauthenticated, a quarter of them one user's.
func (p *Proxy) admission() *admission {
	return newAdmission(connLimits{
		max:                        p.o.MaxConnections,
		maxUnauthenticated:         max(p.o.MaxConnections/4, 1),
		maxPerUser:                 max(p.o.MaxConnections/4, 1),
		unauthenticatedHeaderBytes: unauthenticatedHeaderBudget,
	})
}

// limit tightens srv (reverseproxy.NewServer's) to the signature proxy's limits, and
// gives each request its connection under the admission.
func (p *Proxy) limit(srv *http.Server) {
	reverseproxy.LimitHeaders(srv, p.o.MaxHeaderBytes)
	srv.ReadHeaderTimeout = handshakeTimeout
	srv.ConnContext = connContext
	h2 := *srv.HTTP2
	h2.MaxReadFrameSize = maxFrameSize
	h2.MaxReceiveBufferPerStream = streamReceiveWindow
	h2.MaxReceiveBufferPerConnection = connReceiveWindow
	srv.HTTP2 = &h2
}
