package execproxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bridge is an HTTP CONNECT endpoint on loopback that tunnels connections to the exec
// proxy's unix socket. Every local user can reach a loopback port, so the bridge admits
// only CONNECT requests that carry its secret (ProxyURL) and serves at most MaxBridgeConns
// connections at once; a refused connection never reaches the proxy, so it neither keeps
// the proxy from idling nor starts it again. A tunnel carries only the client's TLS stream,
// which the proxy authenticates with mutual TLS. Close stops it. A Bridge is safe for
// concurrent use.
type Bridge struct {
	// Addr is the bridge's loopback address (host:port); it holds no secret.
	Addr string

	proxyURL *url.URL
	basic    []byte // the Proxy-Authorization credentials the bridge admits
	ln       net.Listener
	resolve  func(ctx context.Context, stale string) (string, error)
	log      *slog.Logger

	mu     sync.Mutex
	socket string
	open   map[net.Conn]struct{} // client sides of the connections, closed by Close
	conns  sync.WaitGroup
	closed chan struct{}
}

// MaxBridgeConns is how many connections a Bridge serves at once, tunnels and connections
// still sending their CONNECT request together. Beyond it a connection is answered 503 and
// closed, so that no local user can exhaust the client's file descriptors.
const MaxBridgeConns = 128

// bridgeUser is the user name in ProxyURL; only the password, a fresh secret, matters.
const bridgeUser = "kplug"

// maxConnectHeader bounds a CONNECT request; clients send a few hundred bytes.
const maxConnectHeader = 16 << 10

// connectTimeout bounds the time from accepting a connection to its CONNECT request.
const connectTimeout = 10 * time.Second

// NewBridge listens on 127.0.0.1 and tunnels to socket. When the socket refuses connections
// (the proxy crashed), resolve is called with the stale socket to start the proxy again and
// return the new socket.
func NewBridge(socket string, resolve func(ctx context.Context, stale string) (string, error), log *slog.Logger) (*Bridge, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("exec proxy: bridge: %w", err)
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("exec proxy: bridge: %w", err)
	}
	password := hex.EncodeToString(secret)
	b := &Bridge{
		Addr:     ln.Addr().String(),
		proxyURL: &url.URL{Scheme: "http", User: url.UserPassword(bridgeUser, password), Host: ln.Addr().String()},
		basic:    []byte(base64.StdEncoding.EncodeToString([]byte(bridgeUser + ":" + password))),
		ln:       ln, resolve: resolve, log: log, socket: socket,
		open: map[net.Conn]struct{}{}, closed: make(chan struct{}),
	}
	go b.serve()
	return b, nil
}

// ProxyURL returns the URL clients give as their proxy (rest.Config.Proxy, a kubeconfig's
// proxy-url): http://kplug:SECRET@Addr. Go's HTTP, SPDY and WebSocket clients send its
// credentials in the CONNECT request's Proxy-Authorization header, which the bridge
// requires. It is a credential: keep it out of logs, argv and files other users can read.
func (b *Bridge) ProxyURL() *url.URL {
	u := *b.proxyURL
	return &u
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
		full := len(b.open) >= MaxBridgeConns
		if !full {
			b.open[conn] = struct{}{}
		}
		b.mu.Unlock()
		if full {
			// A fresh connection's send buffer is empty: this write does not block.
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			_ = conn.Close()
			continue
		}
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
	_ = client.SetReadDeadline(time.Now().Add(connectTimeout))
	header := &io.LimitedReader{R: client, N: maxConnectHeader}
	br := bufio.NewReader(header)
	if refusal := b.admit(br); refusal != "" {
		_, _ = io.WriteString(client, refusal)
		return
	}
	header.N = math.MaxInt64 // the tunnel's bytes
	_ = client.SetReadDeadline(time.Time{})
	upstream, err := b.dial(context.Background())
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

// admit reads the CONNECT request from r and returns the response that refuses it, or ""
// when the tunnel may open: a CONNECT with the bridge's credentials.
func (b *Bridge) admit(r *bufio.Reader) string {
	req, err := http.ReadRequest(r)
	if err != nil {
		return "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	}
	if req.Method != http.MethodConnect {
		return "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	}
	scheme, credentials, _ := strings.Cut(req.Header.Get("Proxy-Authorization"), " ")
	if !strings.EqualFold(scheme, "Basic") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(credentials)), b.basic) != 1 {
		return "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"kplug\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	}
	return ""
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
