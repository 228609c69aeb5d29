// Package reverseproxy is the plumbing the proxies of kplug (the exec proxy, the mixed
// version proxy and the signature proxy) share around httputil.ReverseProxy: one pool of
// copy buffers, one adapter from slog for ReverseProxy.ErrorLog, the two response writers
// that record what a handler answered (StatusRecorder passes the response on, Capture
// keeps it), the metav1.Status error answer clients print as they print kube-apiserver's,
// and the TLS server with kube-apiserver's limits and graceful shutdown (NewServer,
// LimitHeaders, ServeTLS).
package reverseproxy

import (
	"crypto/tls"
	"encoding/json"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BufferPool lends ReverseProxy its 32 KiB copy buffers instead of allocating one per
// response. One pool serves every proxy of the process; it is safe for concurrent use.
var BufferPool httputil.BufferPool = newBufferPool(32 << 10)

// WatchBufferPool lends the copy buffers of streams of events (IsStream): ReverseProxy
// holds a response's buffer until the response ends, and a watch lasts minutes while
// its events, a few KiB, come seconds apart. 1,000 watches held 28 MiB of 32 KiB
// buffers in sidecar B's heap under `make load`; an event larger than 4 KiB is copied
// in several writes, each flushed, as a stream's writes are anyway.
var WatchBufferPool httputil.BufferPool = newBufferPool(4 << 10)

func newBufferPool(size int) *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, size); return &b }}}
}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(s []byte) { b.p.Put(&s) }

// ErrorLog adapts l for ReverseProxy.ErrorLog: the proxy's own failures (a response body
// cut short, a failed upgrade copy) are warnings.
func ErrorLog(l *slog.Logger) *log.Logger {
	return slog.NewLogLogger(l.Handler(), slog.LevelWarn)
}

// WriteStatus answers with a metav1.Status of reason and message, as kube-apiserver
// answers its errors, so that clients print the message. A positive retryAfter adds
// Retry-After and the Status's retryAfterSeconds.
func WriteStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string, retryAfter int) {
	s := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reason,
		Code:     int32(code), //nolint:gosec // an HTTP status code fits
	}
	if retryAfter > 0 {
		s.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(retryAfter)} //nolint:gosec // seconds, small
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	body, _ := json.Marshal(s)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// HTTP1Transport is the transport a proxy forwards with when the requests may upgrade
// (exec, attach, port-forward over SPDY or WebSocket): HTTP/1.1 only, since Go's HTTP/2
// client cannot carry an upgrade. c verifies the server and presents the proxy's client
// certificate; timeout bounds dialling and the TLS handshake each. Up to 64 idle
// connections per host are kept for 90 s.
func HTTP1Transport(c *tls.Config, timeout time.Duration) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     c,
		TLSHandshakeTimeout: timeout,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
}

// LocalUnreachableMessage answers a request when the local apiserver cannot be reached
// and no peer serves what it asks for (the mixed version proxy, as a filter and as a
// sidecar). It names no address: clients may be anonymous.
const LocalUnreachableMessage = "mvproxy: the local apiserver is unreachable; see the proxy's log"

// LocalMayHaveProcessedMessage answers a request that is not a read when the connection
// to the local apiserver failed after the request may have reached it: it may have been
// processed, so the answer (a 503) carries no Retry-After.
const LocalMayHaveProcessedMessage = "mvproxy: the local apiserver did not answer; the request may have been processed; see the proxy's log"

// IsStream reports whether req asks kube-apiserver for a stream that lasts as long as
// the client wants: a watch (a watch query parameter whose first value is neither false
// nor 0, in any case, as kube-apiserver reads it, or a /watch/ path), or a log followed
// (follow=true). Only the size of the proxy's copy buffer depends on it.
func IsStream(req *http.Request) bool {
	q := req.URL.Query()
	if w, ok := q["watch"]; ok && len(w) > 0 {
		switch strings.ToLower(w[0]) {
		case "false", "0":
		default:
			return true
		}
	}
	if f, err := strconv.ParseBool(q.Get("follow")); err == nil && f {
		return true
	}
	return strings.Contains(req.URL.Path, "/watch/")
}

// StreamsWithSmallBuffers returns a handler that serves streams (IsStream) with a copy
// of rp whose copy buffers come from WatchBufferPool, and other requests with rp. rp
// must not change afterwards, but what its fields point to may.
func StreamsWithSmallBuffers(rp *httputil.ReverseProxy) http.Handler {
	streams := *rp
	streams.BufferPool = WatchBufferPool
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsStream(r) {
			streams.ServeHTTP(w, r)
			return
		}
		rp.ServeHTTP(w, r)
	})
}
