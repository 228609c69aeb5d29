package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/internal/reverseproxy"
)

// newHandler forwards every request to the upstream API server. hijackedClosed is told
// when the client connection of an upgraded stream closes.
func newHandler(o Options, hijackedClosed func(net.Conn)) (http.Handler, error) {
	target, err := url.Parse(o.Upstream.Host)
	if err != nil || target.Host == "" {
		return nil, fmt.Errorf("exec proxy: invalid API server URL %q", o.Upstream.Host)
	}
	streams, upgrades, err := upstreamTransports(o)
	if err != nil {
		return nil, err
	}
	ua := &upgradeAware{upgrades: upgrades, modify: o.ModifyRequest}
	ua.streams.Store(streams)
	if o.RenewConnections != nil {
		go ua.renewOn(o.RenewConnections)
	}
	m := o.Metrics
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			// The outgoing request keeps the client's RequestURI, which the transport
			// ignores but a signer may read (RFC 9421's @path and @query prefer it): the
			// target sent is the URL's, with the server URL's path and without the query
			// parts ReverseProxy dropped, so that is all a signer may see.
			pr.Out.RequestURI = ""
		},
		Transport:     ua,
		FlushInterval: -1, // watches and logs -f: every write reaches the client at once
		BufferPool:    reverseproxy.BufferPool,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			o.logger().Warn("exec proxy: upstream request failed", "method", r.Method, "path", r.URL.Path, "error", err)
			m.observeError()
			reverseproxy.WriteStatus(w, http.StatusBadGateway, metav1.StatusReasonUnknown, fmt.Sprintf("exec proxy: %s %s: %v", r.Method, r.URL.Path, err), 0)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := reverseproxy.NewStatusRecorder(w)
		if err := reverseproxy.CheckConnection(r.Header); err != nil {
			// ReverseProxy would drop the fields named, after the client chose them and
			// before ModifyRequest signs: the API server would get another request (one
			// without its Impersonate-User, say) than the one the client sent.
			reverseproxy.WriteStatus(rec, http.StatusBadRequest, metav1.StatusReasonBadRequest, "exec proxy: "+err.Error(), 0)
			m.observe(r.Method, rec.Code, time.Since(start))
			return
		}
		// For an upgrade, the backend's end of the stream is recorded in pair, so that it can
		// be closed when the client's end closes: TLS has no half-close to pass on.
		pair := &upgradePair{clientClosed: hijackedClosed}
		rp.ServeHTTP(&upgradeWatcher{StatusRecorder: rec, pair: pair}, r.WithContext(context.WithValue(r.Context(), pairKey{}, pair)))
		m.observe(r.Method, rec.Code, time.Since(start))
	}), nil
}

// upstreamTransports returns the transport for ordinary requests (HTTP/2 when the server
// offers it) and an HTTP/1.1-only one for upgrades: SPDY cannot run over HTTP/2.
func upstreamTransports(o Options) (streams, upgrades *http.Transport, err error) {
	cfg := rest.CopyConfig(o.Upstream)
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("exec proxy: upstream TLS: %w", err)
	}
	if tlsConfig == nil && (o.GetClientCertificate != nil || o.ClientSessionCache != nil) {
		// A server trusted through the system roots: rest.TLSConfigFor returns nil, but the
		// client certificate must be presented all the same.
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if tlsConfig != nil && o.GetClientCertificate != nil {
		tlsConfig.GetClientCertificate = o.GetClientCertificate
	}
	if tlsConfig != nil && o.ClientSessionCache != nil {
		tlsConfig.ClientSessionCache = o.ClientSessionCache
	}
	proxy := cfg.Proxy
	if proxy == nil {
		proxy = http.ProxyFromEnvironment
	}
	// Timeouts as client-go's transports have them: an API server that does not accept the
	// connection or finish the handshake fails the request instead of holding it, and a
	// pooled HTTP/2 connection that stops answering is pinged and dropped. No response
	// header timeout: a watch, a logs -f or an exec waits for its first byte as long as it
	// must, and the client's own timeout (its request context) still ends the request.
	dial := (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	streams = &http.Transport{
		Proxy: proxy, DialContext: dial, TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 32,
		HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}
	if o.RenewConnections != nil {
		// A retired transport's connections close once their last stream has been idle this long.
		streams.IdleConnTimeout = 90 * time.Second
	}
	upgrades = &http.Transport{
		Proxy: proxy, DialContext: dial, TLSHandshakeTimeout: 10 * time.Second,
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	if tlsConfig != nil {
		h1 := tlsConfig.Clone()
		h1.NextProtos = []string{"http/1.1"}
		upgrades.TLSClientConfig = h1
	}
	return streams, upgrades, nil
}

// upgradeAware sends upgrade requests over HTTP/1.1 and lets the plugin modify requests.
type upgradeAware struct {
	streams  atomic.Pointer[http.Transport]
	upgrades *http.Transport
	modify   func(*http.Request) error
}

// renewOn starts a fresh pool of connections on each receive: later requests open new
// connections (with a rotated client certificate), while requests in flight, watches
// included, finish on the old ones. Upgraded connections are never reused anyway.
func (u *upgradeAware) renewOn(ch <-chan struct{}) {
	for range ch {
		old := u.streams.Load()
		u.streams.Store(old.Clone())
		old.CloseIdleConnections()
		u.upgrades.CloseIdleConnections()
	}
}

func (u *upgradeAware) RoundTrip(req *http.Request) (*http.Response, error) {
	if u.modify != nil {
		asSent(req.Header)
		if err := u.modify(req); err != nil {
			return nil, fmt.Errorf("modifying the request: %w", err)
		}
	}
	if !reverseproxy.IsUpgrade(req) {
		return u.streams.Load().RoundTrip(req)
	}
	resp, err := u.upgrades.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
		if pair, ok := req.Context().Value(pairKey{}).(*upgradePair); ok {
			if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
				pair.setBackend(rwc)
			}
		}
	}
	return resp, err
}

// asSent makes h what the transport writes, so that ModifyRequest signs what the API
// server receives: both of Go's transports send only the first User-Agent line, which a
// client may have sent twice.
func asSent(h http.Header) {
	if ua := h["User-Agent"]; len(ua) > 1 {
		h["User-Agent"] = ua[:1]
	}
}

// pairKey finds a request's upgradePair in its context.
type pairKey struct{}

// upgradePair links the two ends of an upgraded stream.
type upgradePair struct {
	mu           sync.Mutex
	backend      io.Closer
	clientClosed func(net.Conn)
}

func (p *upgradePair) setBackend(c io.Closer) {
	p.mu.Lock()
	p.backend = c
	p.mu.Unlock()
}

func (p *upgradePair) closeBackend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.backend != nil {
		_ = p.backend.Close()
	}
}

// upgradeWatcher hands out, on Hijack, a client connection that closes the backend's
// end of the stream once the client's end is done.
type upgradeWatcher struct {
	*reverseproxy.StatusRecorder
	pair *upgradePair
}

func (u *upgradeWatcher) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(u.StatusRecorder).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return &clientEnd{Conn: conn, pair: u.pair}, rw, nil
}

// Unwrap lets http.ResponseController reach Flush.
func (u *upgradeWatcher) Unwrap() http.ResponseWriter { return u.StatusRecorder }

type clientEnd struct {
	net.Conn
	pair   *upgradePair
	closed sync.Once
}

// Close closes the client's end and reports it (ReverseProxy closes it when either
// direction of the stream ends).
func (c *clientEnd) Close() error {
	c.closed.Do(func() {
		if c.pair.clientClosed != nil {
			c.pair.clientClosed(c.Conn)
		}
	})
	return c.Conn.Close()
}

func (c *clientEnd) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.pair.closeBackend()
	}
	return n, err
}
