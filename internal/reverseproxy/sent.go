package reverseproxy

import (
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// Sent records whether a proxied request may have reached its server. Once any attempt
// to send it has written its headers, the server may have processed it: sending it to
// another server, or telling the client to send it again (Retry-After, which client-go
// obeys for every method), could then apply it twice. Before that, nothing reached the
// server (the dial or the TLS handshake failed), and both are safe. The zero value is
// ready; it is safe for concurrent use.
type Sent struct{ headers atomic.Bool }

// Trace returns req with a trace that records in s when req's headers are written.
func (s *Sent) Trace(req *http.Request) *http.Request {
	return req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteHeaders: func() { s.headers.Store(true) },
	}))
}

// Maybe reports whether an attempt may have sent the request.
func (s *Sent) Maybe() bool { return s.headers.Load() }

// Repeatable reports whether a request of method may be sent again whatever became of
// it: it only reads (GET, HEAD, OPTIONS).
func Repeatable(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}
