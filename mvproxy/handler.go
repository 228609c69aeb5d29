package mvproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/internal/reverseproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// retryAfterSeconds is what a client is told to wait while the caches sync.
const retryAfterSeconds = 1

// HandlerOptions configure a Handler.
type HandlerOptions struct {
	// Local serves what this server serves: the rest of a k8s.io/apiserver handler chain,
	// or a reverse proxy to the local kube-apiserver. Required.
	Local http.Handler
	// Directory says who serves what. Required.
	Directory *Directory
	// PeerTransport carries requests to peers. It must verify each peer's serving
	// certificate with the peer CA for a fixed name (tls.Config.ServerName, e.g.
	// DefaultPeerServerName), never for the address a Lease names, and present the proxy
	// client certificate. Required.
	PeerTransport http.RoundTripper
	// Identify tells who sent a request (see CertIdentifier). An error answers 401.
	// Required; in a k8s.io/apiserver chain, build the Caller from request.UserFrom.
	Identify func(*http.Request) (Caller, error)
	// RefreshLocal, if set, is called when a resource is found on no server, so that a
	// resource the local server started serving since the last refresh (a new CRD) is not
	// answered with 404 or sent to a peer. It must limit how often it really refreshes
	// (sidecar.LocalDiscovery.Refresh does).
	RefreshLocal func(context.Context) error
	// Metrics, if set, records the proxy's metrics.
	Metrics *Metrics
	// Logger receives one line per proxying failure; nil discards.
	Logger *slog.Logger
}

// Handler routes each request to the local handler or a capable peer and serves the
// peer-aggregated discovery document. It is safe for concurrent use.
type Handler struct {
	o    HandlerOptions
	log  *slog.Logger
	peer *httputil.ReverseProxy
	// peerStreams serves with peer, streams with small copy buffers.
	peerStreams http.Handler
	merged      *discovery.MergedHandler
	// refreshing is set while a background refresh of stale local discovery runs.
	refreshing atomic.Bool
}

// NewHandler checks o and returns the handler.
func NewHandler(o HandlerOptions) (*Handler, error) {
	var missing []string
	if o.Local == nil {
		missing = append(missing, "Local")
	}
	if o.Directory == nil {
		missing = append(missing, "Directory")
	}
	if o.PeerTransport == nil {
		missing = append(missing, "PeerTransport")
	}
	if o.Identify == nil {
		missing = append(missing, "Identify")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("mvproxy: NewHandler: missing %v", missing)
	}
	h := &Handler{o: o, log: o.Logger}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.peer = &httputil.ReverseProxy{
		Rewrite:        rewritePeer,
		Transport:      &failoverTransport{base: o.PeerTransport, metrics: o.Metrics, log: h.log},
		ModifyResponse: h.recordPeerResponse,
		ErrorHandler:   h.peerError,
		ErrorLog:       reverseproxy.ErrorLog(h.log),
		BufferPool:     reverseproxy.BufferPool,
	}
	h.peerStreams = reverseproxy.StreamsWithSmallBuffers(h.peer)
	h.merged = &discovery.MergedHandler{Local: o.Local, Peers: o.Directory.PeerGroups, Observe: o.Metrics.mergedCache, Logger: h.log}
	return h, nil
}

type routeKey struct{}

// routeState travels with a request forwarded to peers.
type routeState struct {
	gvr   discovery.GVR
	peers []PeerInfo
	sent  reverseproxy.Sent // whether an attempt may have reached a peer
}

// errNoRoute is the failure of a request that reached the peer path without the route
// ServeHTTP stores: a bug, answered with a 503 rather than a panic in a proxy goroutine.
var errNoRoute = errors.New("mvproxy: a request for peers carries no route")

// routeOf returns the route ServeHTTP stored in ctx, or false when there is none (or it
// names no peer).
func routeOf(ctx context.Context) (*routeState, bool) {
	st, ok := ctx.Value(routeKey{}).(*routeState)
	return st, ok && st != nil && len(st.peers) > 0
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := reverseproxy.CheckConnection(r.Header); err != nil {
		// The forward (to the local server or a peer) would drop the fields named: the
		// server behind would answer another request than the client sent, one without
		// its Impersonate-User, say.
		reverseproxy.WriteStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "mvproxy: "+err.Error(), 0)
		return
	}
	caller, err := h.o.Identify(r)
	if err != nil {
		h.o.Metrics.ProxyError(ErrorUnauthenticated, discovery.GVR{})
		reverseproxy.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "mvproxy: "+err.Error(), 0)
		return
	}
	proxied := caller.FromPeer && guardSet(r.Header)
	if !caller.FromPeer {
		// A client must not turn proxying off (upstream honours the header from anyone).
		deleteGuard(r.Header)
	}
	r = r.WithContext(withCaller(r.Context(), caller))

	if r.URL.Path == "/apis" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		answer, err := discovery.Negotiate(r.Header.Get("Accept"))
		if err != nil {
			reverseproxy.WriteStatus(w, http.StatusRequestHeaderFieldsTooLarge, metav1.StatusReasonBadRequest, "mvproxy: "+err.Error(), 0)
			return
		}
		switch answer {
		case discovery.Merged, discovery.MergedProtobuf:
			if !proxied {
				h.serveMerged(w, r)
				return
			}
		case discovery.Local, discovery.LocalProtobuf:
			h.o.Metrics.localDiscoveryRequest()
		}
		h.o.Local.ServeHTTP(w, r)
		return
	}

	gvr, sub, isResource := resourceOf(r.URL.Path)
	in := RouteInput{IsResource: isResource, Proxied: proxied}
	decision, key := h.route(r.Context(), in, gvr, sub)
	switch decision.Target {
	case Local:
		h.o.Local.ServeHTTP(w, r)
	case NotReady:
		reverseproxy.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("mvproxy: cannot route %s yet: %s", gvr, decision.Reason), retryAfterSeconds)
	case LocalUnavailable:
		h.o.Metrics.ProxyError(ErrorLocalUnreachable, h.o.Directory.MetricLabels(gvr))
		reverseproxy.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			reverseproxy.LocalUnreachableMessage, retryAfterSeconds)
	case Peer:
		peers := h.o.Directory.Capable(key)
		if len(peers) == 0 { // the last capable peer left since route
			h.o.Local.ServeHTTP(w, r)
			return
		}
		// Spread load; the order is also the failover order.
		rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] }) //nolint:gosec // load spreading, not security
		ctx := context.WithValue(r.Context(), routeKey{}, &routeState{gvr: gvr, peers: peers})
		h.peerStreams.ServeHTTP(w, r.WithContext(ctx))
	}
}

// route fills in the input from the Directory and decides; key is what capable peers
// must serve: the resource, or resource/subresource when only the subresource is missing
// locally and a peer lists it.
func (h *Handler) route(ctx context.Context, in RouteInput, gvr discovery.GVR, sub string) (Decision, discovery.GVR) {
	if !in.IsResource || in.Proxied {
		return Route(in), gvr
	}
	dir := h.o.Directory
	key := gvr
	fill := func() {
		key = gvr
		local := dir.Local()
		in.LocalServes = local.Serves(gvr)
		in.LocalStale = dir.LocalStale()
		in.Synced = dir.Synced()
		in.CapablePeers = len(dir.Capable(gvr))
		if sub != "" && in.LocalServes && !local.Serves(gvr.Subresource(sub)) {
			// A subresource added in another version (e.g. a new one on pods).
			if n := len(dir.Capable(gvr.Subresource(sub))); n > 0 {
				key, in.LocalServes, in.CapablePeers = gvr.Subresource(sub), false, n
			}
		}
	}
	fill()
	d := Route(in)
	switch {
	case h.o.RefreshLocal == nil:
	case d.Target == Local && !in.LocalServes:
		// Found nowhere: perhaps a CRD or APIService appeared locally since the last refresh.
		d = h.refreshAndRoute(ctx, ctx, &in, fill)
	case d.Target == LocalUnavailable:
		// The local server was down: read what it serves now that it may be back (as
		// another version, during an upgrade), waiting at most a second for the answer.
		wait, cancel := context.WithTimeout(ctx, staleRefreshWait)
		defer cancel()
		d = h.refreshAndRoute(ctx, wait, &in, fill)
	case in.LocalStale:
		// A peer serves it meanwhile; read the local discovery again in the background, so
		// that requests go back to the local server as soon as it is back.
		h.refreshInBackground()
	}
	return d, key
}

// refreshInBackground starts one refresh of the local discovery unless one is running.
func (h *Handler) refreshInBackground() {
	if !h.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer h.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), backgroundRefreshTimeout)
		defer cancel()
		if err := h.o.RefreshLocal(ctx); err != nil {
			h.log.Debug("refreshing local discovery", "err", err)
		}
	}()
}

// backgroundRefreshTimeout bounds a refresh no request waits for.
const backgroundRefreshTimeout = 30 * time.Second

// staleRefreshWait bounds how long a request waits for local discovery to be read again
// after the local server was unreachable; past it, the client is told to retry.
const staleRefreshWait = time.Second

func (h *Handler) refreshAndRoute(ctx, wait context.Context, in *RouteInput, fill func()) Decision {
	if err := h.o.RefreshLocal(wait); err != nil && ctx.Err() == nil {
		h.log.Debug("refreshing local discovery", "err", err)
	}
	fill()
	return Route(*in)
}

// rewritePeer builds the request to a peer: the peer's address (the failover transport
// may change it), the one-hop guard, and identity headers only from the authenticated
// caller.
func rewritePeer(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = "https"
	pr.Out.URL.Host = "" // failoverTransport picks the peer, and refuses without a route
	if st, ok := routeOf(pr.In.Context()); ok {
		pr.Out.URL.Host = st.peers[0].Address
	}
	pr.Out.Host = ""
	ForwardIdentity(pr, true)
}

func (h *Handler) recordPeerResponse(resp *http.Response) error {
	if st, ok := routeOf(resp.Request.Context()); ok {
		h.o.Metrics.reroutedRequest(strconv.Itoa(resp.StatusCode), st.gvr)
	}
	return nil
}

func (h *Handler) peerError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away
	}
	st, ok := routeOf(r.Context())
	if !ok {
		h.log.Error("proxying to a peer", "err", err)
		reverseproxy.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "mvproxy: no peer to send the request to; see the proxy's log", 0)
		return
	}
	h.o.Metrics.reroutedRequest(strconv.Itoa(http.StatusServiceUnavailable), st.gvr)
	// Peer addresses and dial errors go to the log, not to a client that may be anonymous.
	if st.sent.Maybe() && !reverseproxy.Repeatable(r.Method) {
		// A peer may have processed it: no Retry-After, which clients obey for any method.
		h.log.Warn("a capable peer did not answer", "resource", st.gvr.String(), "method", r.Method, "err", err)
		reverseproxy.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("mvproxy: %s: the peer did not answer; the request may have been processed; see the proxy's log", st.gvr), 0)
		return
	}
	h.log.Warn("no capable peer reachable", "resource", st.gvr.String(), "err", err)
	reverseproxy.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
		fmt.Sprintf("mvproxy: %s is served by %d peer(s), none reachable; see the proxy's log", st.gvr, len(st.peers)), retryAfterSeconds)
}

// failoverTransport tries the request's capable peers in turn while a connection fails
// before the request could reach the peer (its headers were never written), or whatever
// became of it for a read without a body: a request that may have been processed is never
// sent to a second peer. Each attempt borrows the body through an attemptBody, so that a
// transport still reading after its RoundTrip returned (the RoundTripper contract allows
// it) never takes bytes meant for the next peer.
type failoverTransport struct {
	base    http.RoundTripper
	metrics *Metrics
	log     *slog.Logger
}

func (t *failoverTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	st, ok := routeOf(req.Context())
	if !ok {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, errNoRoute
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	if hasBody {
		defer req.Body.Close()
	}
	var errs []error
	for _, p := range st.peers {
		out := *req
		u := *req.URL
		u.Host = p.Address
		out.URL, out.Host = &u, ""
		var body *attemptBody
		if hasBody {
			body = &attemptBody{r: req.Body}
			out.Body = body
		}
		resp, err := t.base.RoundTrip(st.sent.Trace(&out))
		if err == nil {
			return resp, nil
		}
		t.metrics.ProxyError(ErrorPeerUnreachable, st.gvr)
		t.log.Warn("peer unreachable", "peer", p.ID, "address", p.Address, "resource", st.gvr.String(), "err", err)
		errs = append(errs, fmt.Errorf("peer %s at %s: %w", p.ID, p.Address, err))
		whole := body == nil || body.end()
		if req.Context().Err() != nil || !whole || (st.sent.Maybe() && !reverseproxy.Repeatable(req.Method)) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// attemptBody lends the request body to one attempt. Closing it leaves the body to the
// failover transport, which closes it once.
type attemptBody struct {
	r       io.Reader
	mu      sync.Mutex
	ended   bool // the attempt failed: it reads no more
	reading int  // Reads under way
	read    bool // a byte was read
}

// errAttemptEnded answers a transport that reads the body of an attempt it gave up.
var errAttemptEnded = errors.New("mvproxy: this attempt to reach a peer has ended; its body went to the next peer")

func (b *attemptBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.ended {
		b.mu.Unlock()
		return 0, errAttemptEnded
	}
	b.reading++
	b.mu.Unlock()
	n, err := b.r.Read(p)
	b.mu.Lock()
	b.reading--
	b.read = b.read || n > 0
	b.mu.Unlock()
	return n, err
}

func (b *attemptBody) Close() error { return nil }

// end stops the attempt from reading any more of the body, and reports whether the body
// is whole, so that the next peer may have it: nothing was read, and no Read is under
// way (one could return bytes the next peer would then miss).
func (b *attemptBody) end() (whole bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = true
	return !b.read && b.reading == 0
}

// serveMerged answers GET /apis with the peer-aggregated document once the caches have
// synced: before, a merge without the peers would hide their groups from clients that
// cache discovery.
func (h *Handler) serveMerged(w http.ResponseWriter, r *http.Request) {
	if !h.o.Directory.Synced() {
		reverseproxy.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			"mvproxy: cannot serve peer-aggregated discovery yet: "+errNotSynced.Error(), retryAfterSeconds)
		return
	}
	h.merged.ServeHTTP(w, r)
}

// errNotSynced is returned while the caches have not been filled once.
var errNotSynced = errors.New("mvproxy: discovery caches have not synced yet")
