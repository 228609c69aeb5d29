package execproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bridge is an HTTP CONNECT endpoint on loopback that tunnels every connection to the exec
// proxy's unix socket. It carries only the client's TLS stream, which the proxy
// authenticates with mutual TLS, so another local user who reaches the bridge gets nothing.
// Close stops it. A Bridge is safe for concurrent use.
type Bridge struct {
	// URL is the bridge's address, for proxy-url or rest.Config.Proxy.
	URL string

	ln      net.Listener
	resolve func(ctx context.Context, stale string) (string, error)
	log     *slog.Logger

	mu     sync.Mutex
	socket string
	open   map[net.Conn]struct{} // client sides of the tunnels, closed by Close
	conns  sync.WaitGroup
	closed chan struct{}
}

// NewBridge listens on 127.0.0.1 and tunnels to socket. When the socket refuses connections
// (the proxy crashed), resolve is called with the stale socket to start the proxy again and
// return the new socket.
func NewBridge(socket string, resolve func(ctx context.Context, stale string) (string, error), log *slog.Logger) (*Bridge, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("exec proxy: bridge: %w", err)
	}
	b := &Bridge{URL: "http://" + ln.Addr().String(), ln: ln, resolve: resolve, log: log, socket: socket,
		open: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	go b.serve()
	return b, nil
}

// Close stops accepting, closes the open tunnels and waits for them to end.
func (b *Bridge) Close() error {
	err := b.ln.Close()
	<-b.closed
	b.mu.Lock()
	for c := range b.open {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.conns.Wait()
	return err
}

func (b *Bridge) serve() {
	defer close(b.closed)
	for {
		conn, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.open[conn] = struct{}{}
		b.mu.Unlock()
		b.conns.Add(1)
		go func() {
			defer b.conns.Done()
			b.tunnel(conn)
			b.mu.Lock()
			delete(b.open, conn)
			b.mu.Unlock()
		}()
	}
}

// tunnel answers one CONNECT and copies bytes both ways until either side closes.
func (b *Bridge) tunnel(client net.Conn) {
	defer client.Close()
	_ = client.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(client)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		_, _ = io.WriteString(client, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	_ = client.SetReadDeadline(time.Time{})
	upstream, err := b.dial(req.Context())
	if err != nil {
		if b.log != nil {
			b.log.Warn("exec proxy unreachable", "error", err)
		}
		_, _ = io.WriteString(client, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	defer upstream.Close()
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// The tunnel carries a TLS session, which has no half-close: when either side is done,
	// close both, so that the proxy and the client see the end at once.
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(upstream, br) // br holds anything the client sent after CONNECT
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, upstream)
		done <- struct{}{}
	}()
	<-done
	_ = client.Close()
	_ = upstream.Close()
	<-done
}

// DialContext connects to the proxy's socket, whatever the address asked for, starting
// the proxy again once if it is gone. It fits rest.Config.Dial.
func (b *Bridge) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	return b.dial(ctx)
}

// dial connects to the proxy's socket, starting the proxy again once if it is gone.
func (b *Bridge) dial(ctx context.Context) (net.Conn, error) {
	b.mu.Lock()
	socket := b.socket
	b.mu.Unlock()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err == nil || b.resolve == nil || !proxyGone(err) {
		return conn, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.socket == socket { // nobody restarted it meanwhile
		fresh, rerr := b.resolve(ctx, socket)
		if rerr != nil {
			return nil, fmt.Errorf("exec proxy at %s is gone and could not be started again: %w", socket, rerr)
		}
		b.socket = fresh
	}
	return d.DialContext(ctx, "unix", b.socket)
}

// proxyGone reports whether a dial error means nothing listens on the socket any more.
func proxyGone(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) || strings.Contains(err.Error(), "no such file")
}
