package execcred

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
)

// GetClientCertificate is a tls.Config hook that presents the plugin's client certificate,
// running the plugin if needed. With no certificate it presents none.
func (a *Authenticator) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cred, err := a.Credential(context.Background())
	if err != nil {
		return nil, err
	}
	if cred.Certificate == nil {
		return &tls.Certificate{}, nil
	}
	return cred.Certificate, nil
}

// DialContext wraps dial (nil means a net.Dialer) so that the connections it makes are
// closed when the plugin's client certificate changes, as client-go does; a token change
// keeps them.
func (a *Authenticator) DialContext(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return a.conns.track(conn), nil
	}
}

// connTracker remembers open connections so that they can all be closed at once.
type connTracker struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	t    *connTracker
	once sync.Once
}

func (t *connTracker) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, t: t}
	t.mu.Lock()
	if t.conns == nil {
		t.conns = map[*trackedConn]struct{}{}
	}
	t.conns[tc] = struct{}{}
	t.mu.Unlock()
	return tc
}

func (t *connTracker) closeAll() {
	t.mu.Lock()
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}
