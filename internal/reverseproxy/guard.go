package reverseproxy

import (
	"container/list"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of a Guard, for a proxy in front of kube-apiserver that anyone may reach.
const (
	// DefaultWriteProgress is how long a response write may make no progress: a client
	// that takes nothing of its answer for that long (over HTTP/2, one that keeps its
	// flow-control window shut) loses the stream, and the request is freed.
	DefaultWriteProgress = 30 * time.Second
	// DefaultHeaderBudget bounds the headers of the requests in handlers at once, across
	// connections, in HTTP/2 header list size (HeaderListSize). A proxy holds up to some
	// ten times that in memory when the fields are tiny (Go's decoded header, the
	// forwarded copy, the upstream request): 32 requests of 1 MiB of 1-byte names held
	// 370 MiB in peerproxy.
	DefaultHeaderBudget = 16 << 20
	// DefaultConnectionHeaderBudget is one connection's share of DefaultHeaderBudget: 100
	// streams of a user in 600 groups (some 40 KiB of header each) fit; 100 requests of
	// 1 MiB do not.
	DefaultConnectionHeaderBudget = 8 << 20
	// DefaultUnreadHeaderBytes bounds the bytes of HTTP/1.1 requests not yet in the
	// handler: 16 headers of 1 MiB at once, some 300 MiB of memory.
	DefaultUnreadHeaderBytes = 16 << 20
	// DefaultMaxConnections bounds a server's connections; past it, the oldest connection
	// of the client host that holds the most is closed.
	DefaultMaxConnections = 4096
)

// refusalWriteTimeout bounds the writing of a refusal: a client that does not take it
// within this loses its connection.
const refusalWriteTimeout = 2 * time.Second

// GuardLimits configure a Guard. A zero field disables its limit.
type GuardLimits struct {
	// WriteProgress is how long one write of a response (a Write or a Flush of the
	// handler's, or the server's last flush once the handler returned) may take. A write
	// that takes longer resets its stream (over HTTP/1.1, fails the connection); one that
	// is still stuck WriteProgress later closes the connection. Each write gets the whole
	// duration again, so a watch or a log that makes progress is never cut, however long
	// it lasts and however long it is idle.
	WriteProgress time.Duration
	// HeaderBudget bounds the header list size (HeaderListSize) of the requests in
	// handlers at once: over it, the connections holding the most are closed, with every
	// request on them.
	HeaderBudget int64
	// ConnectionHeaderBudget bounds it for one connection's requests: a request that
	// would go over it is refused 429 and its connection closed.
	ConnectionHeaderBudget int64
	// MaxConnections bounds the connections of the Guard's listener: past it, the oldest
	// connection of the client host that holds the most is closed.
	MaxConnections int
	// UnreadHeaderBytes bounds the bytes read, across the listener's connections, of
	// requests that have not reached the handler: what Go's server decodes of an HTTP/1.1
	// header before any handler sees it (some 16 times as much memory for tiny lines).
	// Over it, the connections that read the most are closed. Connections once they
	// speak HTTP/2, or switch protocols, are not counted.
	UnreadHeaderBytes int64
}

// DefaultGuardLimits are the Default* limits.
func DefaultGuardLimits() GuardLimits {
	return GuardLimits{
		WriteProgress:          DefaultWriteProgress,
		HeaderBudget:           DefaultHeaderBudget,
		ConnectionHeaderBudget: DefaultConnectionHeaderBudget,
		MaxConnections:         DefaultMaxConnections,
		UnreadHeaderBytes:      DefaultUnreadHeaderBytes,
	}
}

// Guard bounds what clients can make a server hold: its connections (Listener), the
// headers of the requests in its handler, and how long a response that its client does
// not take is kept (Handler). Use it with Protect. It is safe for concurrent use.
type Guard struct {
	limits GuardLimits

	mu       sync.Mutex
	conns    int
	byHost   map[string]*list.List // of *guardedConn, oldest first
	accepted uint64
	held     int64 // header bytes of requests in handlers
	heldBy   map[*guardedConn]int64
	unread   int64 // bytes read of requests not yet in handlers
	unreadBy map[*guardedConn]int64
}

// NewGuard returns a Guard with limits.
func NewGuard(limits GuardLimits) *Guard {
	return &Guard{limits: limits, byHost: map[string]*list.List{}, heldBy: map[*guardedConn]int64{}, unreadBy: map[*guardedConn]int64{}}
}

// Protect puts srv's handler and connections (once served on g.Listener) under g.
func (g *Guard) Protect(srv *http.Server) {
	srv.Handler = g.Handler(srv.Handler)
	srv.ConnContext = g.connContext
}

// Listener is ln with its connections counted, and capped at MaxConnections.
func (g *Guard) Listener(ln net.Listener) net.Listener { return &guardedListener{Listener: ln, g: g} }

type guardedListener struct {
	net.Listener
	g *Guard
}

func (l *guardedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.g.admit(c), nil
}

// guardedConn is a connection accepted by a Guard's listener.
type guardedConn struct {
	net.Conn
	g    *Guard
	host string
	seq  uint64
	// Guarded by g.mu.
	elem    *list.Element // nil once closed
	evicted bool          // closed to keep the header budget: its requests count no more
	// uncounted: its reads are not counted against UnreadHeaderBytes, because a request
	// is in the handler, or for good (HTTP/2, a switched protocol).
	uncounted, forGood bool
}

// Read counts what is read outside handlers against UnreadHeaderBytes.
func (t *guardedConn) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	if n > 0 && t.g.limits.UnreadHeaderBytes > 0 {
		for _, c := range t.unread(int64(n)) {
			_ = c.Conn.Close()
		}
	}
	return n, err
}

// unread counts n bytes read outside handlers, and returns the connections to close to
// stay within UnreadHeaderBytes: those that read the most.
func (t *guardedConn) unread(n int64) (evicted []*guardedConn) {
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.uncounted || t.elem == nil {
		return nil
	}
	g.unread += n
	g.unreadBy[t] += n
	for g.unread > g.limits.UnreadHeaderBytes {
		var most *guardedConn
		for c, b := range g.unreadBy {
			if most == nil || b > g.unreadBy[most] {
				most = c
			}
		}
		g.forgetUnreadLocked(most)
		most.uncounted, most.forGood = true, true
		evicted = append(evicted, most)
	}
	return evicted
}

func (g *Guard) forgetUnreadLocked(t *guardedConn) {
	g.unread -= g.unreadBy[t]
	delete(g.unreadBy, t)
}

// inHandler stops counting t's reads while a request of it is in the handler, or for
// good; done, returned, resumes counting, from zero.
func (t *guardedConn) inHandler(forGood bool) (done func()) {
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forgetUnreadLocked(t)
	t.uncounted = true
	t.forGood = t.forGood || forGood
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		t.uncounted = t.forGood
	}
}

func (g *Guard) admit(c net.Conn) *guardedConn {
	t := &guardedConn{Conn: c, g: g, host: ClientHost(c.RemoteAddr())}
	var evicted []*guardedConn
	g.mu.Lock()
	g.accepted++
	t.seq = g.accepted
	hl := g.byHost[t.host]
	if hl == nil {
		hl = list.New()
		g.byHost[t.host] = hl
	}
	t.elem = hl.PushBack(t)
	g.conns++
	for g.limits.MaxConnections > 0 && g.conns > g.limits.MaxConnections {
		evicted = append(evicted, g.evictLocked())
	}
	g.mu.Unlock()
	for _, e := range evicted {
		_ = e.Conn.Close() // its server goroutine sees the error and closes it
	}
	return t
}

// evictLocked forgets the oldest connection of the host that holds the most (the oldest
// of all when hosts tie) and returns it to be closed: a host that floods the server
// pushes out its own connections, not others'. g.mu is held.
func (g *Guard) evictLocked() *guardedConn {
	var most *list.List
	for _, l := range g.byHost {
		if most == nil || l.Len() > most.Len() ||
			l.Len() == most.Len() && l.Front().Value.(*guardedConn).seq < most.Front().Value.(*guardedConn).seq {
			most = l
		}
	}
	t := most.Front().Value.(*guardedConn)
	g.forgetLocked(t)
	return t
}

func (g *Guard) forgetLocked(t *guardedConn) {
	if t.elem == nil {
		return
	}
	hl := g.byHost[t.host]
	hl.Remove(t.elem)
	if hl.Len() == 0 {
		delete(g.byHost, t.host)
	}
	t.elem = nil
	g.conns--
}

func (t *guardedConn) Close() error {
	t.g.mu.Lock()
	t.g.forgetLocked(t)
	t.g.forgetUnreadLocked(t)
	t.g.mu.Unlock()
	return t.Conn.Close()
}

// ClientHost is the client host of addr, the key connections are counted by: an IPv4
// address, or an IPv6 /64 (what one client is given). The Guard and the signature
// proxy's admission both count by it.
func ClientHost(addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return addr.String()
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String()
}

// hold counts n header bytes of a request on t. It reports false, counting nothing, when
// that would take t over its share, or when t is being closed; otherwise it returns the
// connections to close to bring the total back within the budget: those holding the
// most, t perhaps, whose bytes stop counting at once (their handlers give them back as
// they see the connection closed).
func (t *guardedConn) hold(n int64) (ok bool, evicted []*guardedConn) {
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.evicted || g.limits.ConnectionHeaderBudget > 0 && g.heldBy[t]+n > g.limits.ConnectionHeaderBudget {
		return false, nil
	}
	g.held += n
	g.heldBy[t] += n
	for g.limits.HeaderBudget > 0 && g.held > g.limits.HeaderBudget {
		var most *guardedConn
		for c, held := range g.heldBy {
			if most == nil || held > g.heldBy[most] {
				most = c
			}
		}
		g.held -= g.heldBy[most]
		delete(g.heldBy, most)
		most.evicted = true
		evicted = append(evicted, most)
	}
	return !t.evicted, evicted
}

// unhold gives back n header bytes counted by hold.
func (t *guardedConn) unhold(n int64) {
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.evicted {
		return // given back when it was evicted
	}
	g.held -= n
	if g.heldBy[t] -= n; g.heldBy[t] <= 0 {
		delete(g.heldBy, t)
	}
}

type guardedConnKey struct{}

func (g *Guard) connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if t, ok := c.(*guardedConn); ok && t.g == g {
		return context.WithValue(ctx, guardedConnKey{}, t)
	}
	return ctx
}

// guardedConnOf is the connection of ctx's request, or nil if it did not come through
// a Guard's listener.
func guardedConnOf(ctx context.Context) *guardedConn {
	t, _ := ctx.Value(guardedConnKey{}).(*guardedConn)
	return t
}

// HeldHeaderBytes is the header list size of the requests in g's handler: what the
// budgets count.
func (g *Guard) HeldHeaderBytes() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// HeaderListSize is r's header as HTTP/2 sizes a header list (RFC 9113 §6.5.2): each
// field's name and value and 32 bytes, the pseudo-header fields included. What a server
// holds of r grows with it, whatever the protocol.
func HeaderListSize(r *http.Request) int64 {
	n := int64(len(r.Method) + len(r.Host) + len(r.RequestURI) + 4*32)
	for name, values := range r.Header {
		for _, v := range values {
			n += int64(len(name) + len(v) + 32)
		}
	}
	return n
}

// Handler is h under g: the headers of its requests count against the budgets while h
// runs, and its responses must make progress (GuardLimits). Requests that did not come
// through g's listener are only held to WriteProgress.
func (g *Guard) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := guardedConnOf(r.Context()); t != nil {
			// HTTP/2 reads the headers of other streams, and bodies, outside this
			// handler; a switched protocol reads its stream.
			defer t.inHandler(r.ProtoMajor >= 2 || IsUpgrade(r))()
			n := HeaderListSize(r)
			ok, evicted := t.hold(n)
			for _, c := range evicted {
				_ = c.Conn.Close()
			}
			if !ok {
				refuseOverBudget(w, r, t)
				return
			}
			defer t.unhold(n)
		}
		if g.limits.WriteProgress <= 0 {
			h.ServeHTTP(w, r)
			return
		}
		pw := newProgressWriter(w, r, g.limits.WriteProgress)
		defer pw.stop() // also when h panics: the server then resets the stream
		h.ServeHTTP(pw, r)
		pw.finish()
	})
}

// refuseOverBudget answers 429 to a request that would take its connection over its
// header budget, and closes the connection: its other requests hold the budget.
func refuseOverBudget(w http.ResponseWriter, r *http.Request, t *guardedConn) {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(refusalWriteTimeout))
	w.Header().Set("Connection", "close") // HTTP/1.1; HTTP/2 drops it
	WriteStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
		"too many request headers in progress on this connection: wait for answers, or open another connection", 1)
	_ = rc.Flush()
	if r.ProtoMajor >= 2 {
		_ = t.Conn.Close()
	}
}
