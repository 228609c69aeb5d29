package verifier

import (
	"container/list"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"slices"
	"sync"

	"github.com/kplug/kplug/internal/reverseproxy"
)

// The proxy's connections, by what is known of their clients. A connection is
// unauthenticated until one of its requests authenticates; it then belongs to that
// request's user, until one of its requests fails to authenticate. Anyone can open
// connections, so the unauthenticated ones are few and
// give way: when there are maxUnauthenticated of them, or every slot is taken, a new
// connection closes the oldest unauthenticated one of the client host that holds the most,
// so that a host flooding the proxy with connections that never authenticate pushes out
// its own, not others'. A user holds at most maxPerUser connections; beyond, a connection
// of theirs counts as unauthenticated. Only when every slot belongs to a user does a new
// connection wait to be accepted.
//
// The headers of requests that have not authenticated (being checked, or being refused
// to a client that does not read its answer) are held to a budget across connections: over
// it, the connection holding the most of them is closed, which frees them at once.

// connLimits configure an admission.
type connLimits struct {
	max, maxUnauthenticated, maxPerUser int
	// unauthenticatedHeaderBytes bounds the headers of requests in handlers that have not
	// authenticated, in HTTP/2 header list size (name, value and 32 bytes a field).
	unauthenticatedHeaderBytes int64
}

// admission tracks a server's connections. It is safe for concurrent use.
type admission struct {
	limits connLimits

	mu              sync.Mutex
	room            *sync.Cond // a connection closed or authenticated
	byHost          map[string]*list.List
	unauthenticated int
	authenticated   int
	byUser          map[string]int
	accepted        uint64
	pending         int64                  // header bytes of unauthenticated requests in handlers
	pendingByConn   map[*trackedConn]int64 // the same, by connection
}

func newAdmission(l connLimits) *admission {
	a := &admission{limits: l, byHost: map[string]*list.List{}, byUser: map[string]int{}, pendingByConn: map[*trackedConn]int64{}}
	a.room = sync.NewCond(&a.mu)
	return a
}

// trackedConn is an accepted connection under an admission.
type trackedConn struct {
	net.Conn
	a    *admission
	host string

	// Guarded by a.mu.
	seq    uint64        // order of acceptance
	elem   *list.Element // in a.byHost[host] while unauthenticated
	user   string        // once authenticated
	closed bool
}

// listener is ln under a: Accept admits, closing an unauthenticated connection to make
// room, or waits while every slot belongs to a user.
func (a *admission) listener(ln net.Listener) net.Listener {
	return &admittingListener{Listener: ln, a: a}
}

type admittingListener struct {
	net.Listener
	a *admission
}

func (l *admittingListener) Accept() (net.Conn, error) {
	l.a.mu.Lock()
	for l.a.authenticated >= l.a.limits.max {
		l.a.room.Wait()
	}
	l.a.mu.Unlock()
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.a.admit(c), nil
}

// admit makes room for c and tracks it as unauthenticated.
func (a *admission) admit(c net.Conn) *trackedConn {
	t := &trackedConn{Conn: c, a: a, host: reverseproxy.ClientHost(c.RemoteAddr())}
	var evicted []*trackedConn
	a.mu.Lock()
	for a.unauthenticated+a.authenticated >= a.limits.max && a.unauthenticated == 0 { // every slot is a user's
		a.room.Wait()
	}
	a.accepted++
	t.seq = a.accepted
	hl := a.byHost[t.host]
	if hl == nil {
		hl = list.New()
		a.byHost[t.host] = hl
	}
	t.elem = hl.PushBack(t)
	a.unauthenticated++
	for a.unauthenticated > a.limits.maxUnauthenticated || a.unauthenticated+a.authenticated > a.limits.max {
		evicted = append(evicted, a.evictLocked())
	}
	a.mu.Unlock()
	for _, e := range evicted {
		_ = e.Conn.Close() // its server goroutine sees the error, and closes it
	}
	return t
}

// evictLocked forgets the oldest unauthenticated connection of the host that has the
// most (the oldest of them all when hosts tie), and returns it to be closed. a.mu is held
// and there are at least two unauthenticated connections, the newest just admitted.
func (a *admission) evictLocked() *trackedConn {
	var most *list.List
	for _, l := range a.byHost {
		if most == nil || l.Len() > most.Len() ||
			l.Len() == most.Len() && l.Front().Value.(*trackedConn).seq < most.Front().Value.(*trackedConn).seq {
			most = l
		}
	}
	t := most.Front().Value.(*trackedConn)
	a.forgetLocked(t)
	return t
}

// forgetLocked stops counting t. a.mu is held.
func (a *admission) forgetLocked(t *trackedConn) {
	if t.closed {
		return
	}
	t.closed = true
	if t.elem != nil {
		hl := a.byHost[t.host]
		hl.Remove(t.elem)
		if hl.Len() == 0 {
			delete(a.byHost, t.host)
		}
		t.elem = nil
		a.unauthenticated--
	} else {
		a.authenticated--
		if a.byUser[t.user]--; a.byUser[t.user] == 0 {
			delete(a.byUser, t.user)
		}
	}
	a.room.Broadcast()
}

// Close closes the connection and frees its slot.
func (t *trackedConn) Close() error {
	t.a.mu.Lock()
	t.a.forgetLocked(t)
	t.a.mu.Unlock()
	return t.Conn.Close()
}

// authenticatedAs counts t as user's, unless user has maxPerUser connections already.
func (t *trackedConn) authenticatedAs(user string) {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.closed || t.elem == nil || a.byUser[user] >= a.limits.maxPerUser {
		return
	}
	hl := a.byHost[t.host]
	hl.Remove(t.elem)
	if hl.Len() == 0 {
		delete(a.byHost, t.host)
	}
	t.elem, t.user = nil, user
	a.unauthenticated--
	a.authenticated++
	a.byUser[user]++
	a.room.Broadcast()
}

// refusedOn counts t as unauthenticated again, the newest of its host's: a request on it
// failed to authenticate. A connection keeps a user's slot only while what it sends
// authenticates; otherwise a handful of users (or replays of one signed request each) could
// hold every slot with connections that send nothing valid. It returns the connections to
// close to stay within the unauthenticated share, t itself perhaps.
func (t *trackedConn) refusedOn() (evicted []*trackedConn) {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.closed || t.elem != nil {
		return nil
	}
	a.authenticated--
	if a.byUser[t.user]--; a.byUser[t.user] == 0 {
		delete(a.byUser, t.user)
	}
	hl := a.byHost[t.host]
	if hl == nil {
		hl = list.New()
		a.byHost[t.host] = hl
	}
	t.elem, t.user = hl.PushBack(t), ""
	a.unauthenticated++
	for a.unauthenticated > a.limits.maxUnauthenticated {
		evicted = append(evicted, a.evictLocked())
	}
	a.room.Broadcast()
	return evicted
}

// hold counts n header bytes of an unauthenticated request on t, and returns the
// connections to close to bring the total back within the budget: the ones holding the
// most.
func (t *trackedConn) hold(n int64) (evicted []*trackedConn) {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending += n
	a.pendingByConn[t] += n
	over := a.pending - a.limits.unauthenticatedHeaderBytes
	for over > 0 {
		var most *trackedConn
		for c, held := range a.pendingByConn {
			if held > 0 && (most == nil || held > a.pendingByConn[most]) && !slices.Contains(evicted, c) {
				most = c
			}
		}
		if most == nil {
			break
		}
		evicted = append(evicted, most)
		over -= a.pendingByConn[most] // freed once its handlers see it closed
	}
	return evicted
}

// unhold gives back n header bytes held by hold.
func (t *trackedConn) unhold(n int64) {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending -= n
	if a.pendingByConn[t] -= n; a.pendingByConn[t] <= 0 {
		delete(a.pendingByConn, t)
	}
}

type connKey struct{}

// connContext is http.Server.ConnContext for a server on a's listener: it gives each
// request its tracked connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if t, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, t)
	}
	return ctx
}

// connOf is the tracked connection of ctx's request, or nil outside Proxy.Serve.
func connOf(ctx context.Context) *trackedConn {
	t, _ := ctx.Value(connKey{}).(*trackedConn)
	return t
}

// unauthenticated is a request's headers held against the budget until it
// authenticates or is done. A nil one (a Handler outside Proxy.Serve) does nothing.
type unauthenticated struct {
	conn *trackedConn
	n    int64
}

// holdUnauthenticated counts r's headers against its connection's admission, closing
// the connections that hold the most if that goes over the budget.
func holdUnauthenticated(r *http.Request) *unauthenticated {
	t := connOf(r.Context())
	if t == nil {
		return nil
	}
	u := &unauthenticated{conn: t, n: headerListSize(r)}
	for _, c := range t.hold(u.n) {
		_ = c.Conn.Close()
	}
	return u
}

// authenticated releases the headers and counts the connection as user's.
func (u *unauthenticated) authenticated(user string) {
	if u == nil {
		return
	}
	u.release()
	u.conn.authenticatedAs(user)
}

// refused counts the connection as unauthenticated again: the request did not
// authenticate.
func (u *unauthenticated) refused() {
	if u == nil {
		return
	}
	for _, c := range u.conn.refusedOn() {
		_ = c.Conn.Close()
	}
}

// release gives the headers back; it is idempotent.
func (u *unauthenticated) release() {
	if u == nil || u.n == 0 {
		return
	}
	u.conn.unhold(u.n)
	u.n = 0
}

// closeConnection closes the connection of ctx's request, with every request on it.
func closeConnection(ctx context.Context) {
	if t := connOf(ctx); t != nil {
		_ = t.Conn.Close()
	}
}

// headerListSize is r's header as HTTP/2 sizes a header list (RFC 9113 §6.5.2): each
// field's name and value and 32 bytes, the pseudo-header fields included. It is what the
// server holds of r in proportion, whatever the protocol.
func headerListSize(r *http.Request) int64 {
	n := int64(len(r.Method) + len(r.Host) + len(r.RequestURI) + 4*32)
	for name, values := range r.Header {
		for _, v := range values {
			n += int64(len(name) + len(v) + 32)
		}
	}
	return n
}
