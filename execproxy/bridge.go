package execproxy

import (
	"bufio"
	"container/list"
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
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bridge is an HTTP CONNECT endpoint on loopback that tunnels connections to the exec
// proxy's unix socket. Every local user can reach a loopback port, so the bridge admits
// only CONNECT requests that carry its secret (ProxyURL); a refused connection never
// reaches the proxy, so it neither keeps the proxy from idling nor starts it again. A
// tunnel carries only the client's TLS stream, which the proxy authenticates with mutual
// TLS. Close stops it. A Bridge is safe for concurrent use.
//
// What another local user can do to it is bounded without letting them starve the
// owner: on Linux, connections opened by another user (other than root), and those whose
// client already closed or reset them (their socket has no owner left), are refused as
// soon as they are accepted, by what the kernel records for the client's socket.
// Elsewhere, and wherever the kernel cannot say, a connection must send its CONNECT within
// connectTimeout; at most maxPending connections wait to do so, and a new connection
// closes the one that has waited longest, so that a client that sends its CONNECT at once,
// as every client does, is kept out only by maxPending connections opened in that
// instant. Only tunnels, which needed the secret, count against MaxBridgeConns. The bridge
// holds at most 2*MaxBridgeConns+maxPending+3 file descriptors: a tunnel's connection and
// its connection to the proxy's socket, a waiting connection, and the listener, a
// connection being accepted and the netlink socket that looks up its owner.
type Bridge struct {
	// Addr is the bridge's loopback address (host:port); it holds no secret.
	Addr string

	proxyURL *url.URL
	basic    []byte // the Proxy-Authorization credentials the bridge admits
	ln       net.Listener
	resolve  func(ctx context.Context, stale string) (string, error)
	log      *slog.Logger
	// peerUID tells who opened a client's socket (see ownersConn); uid is the bridge's
	// own user.
	peerUID func(net.Conn) (uint32, error)
	uid     uint32

	mu      sync.Mutex
	socket  string
	pending *list.List                 // connections not yet admitted, oldest first
	waiting map[net.Conn]*list.Element // their place in pending
	tunnels map[net.Conn]struct{}      // admitted connections
	conns   sync.WaitGroup
	closed  chan struct{}
}

// MaxBridgeConns is how many tunnels a Bridge serves at once. Only connections that sent
// the secret count; beyond it a tunnel is refused with 503, so that no client of the
// owner's can exhaust the client's file descriptors.
const MaxBridgeConns = 128

// maxPending bounds the connections still sending their CONNECT request. It is larger
// than MaxBridgeConns, since clients of the owner's open several connections at once, and
// reaching it never refuses a connection: the oldest waiting one is closed instead.
const maxPending = 512

// bridgeUser is the user name in ProxyURL; only the password, a fresh secret, matters.
const bridgeUser = "kplug"

// maxConnectHeader bounds a CONNECT request; clients send a few hundred bytes.
const maxConnectHeader = 16 << 10

// connectTimeout bounds the time from accepting a connection to the end of its CONNECT
// request. Clients send it at once; the bound keeps a connection that does not from
// holding a place in pending for long.
const connectTimeout = 5 * time.Second

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
		peerUID: peerUID, uid: uint32(os.Getuid()), //nolint:gosec // -1 only on Windows, where peerUID always fails
		pending: list.New(), waiting: map[net.Conn]*list.Element{}, tunnels: map[net.Conn]struct{}{},
		closed: make(chan struct{}),
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

// Close stops accepting, closes the open tunnels and waiting connections, and waits for
// them to end.
func (b *Bridge) Close() error {
	err := b.ln.Close()
	<-b.closed
	b.mu.Lock()
	for c := range b.waiting {
		_ = c.Close()
	}
	for c := range b.tunnels {
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
		if !b.ownersConn(conn) {
			// A fresh connection's send buffer is empty: this write does not block.
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(conn, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			_ = conn.Close()
			continue
		}
		b.mu.Lock()
		if b.pending.Len() >= maxPending {
			oldest := b.pending.Remove(b.pending.Front()).(net.Conn)
			delete(b.waiting, oldest)
			_ = oldest.Close() // its goroutine sees the error and ends
		}
		b.waiting[conn] = b.pending.PushBack(conn)
		b.mu.Unlock()
		b.conns.Add(1)
		go func() {
			defer b.conns.Done()
			b.tunnel(conn)
		}()
	}
}

// ownersConn reports whether conn may go on to send its CONNECT: it was opened by the
// bridge's own user or by root, or the OS cannot tell by whom. Any other user could only
// guess the secret; refusing them here keeps them from taking places in pending. A
// connection whose client already closed or reset it is refused too: its socket has no
// owner, whom anybody could have been.
func (b *Bridge) ownersConn(conn net.Conn) bool {
	if b.peerUID == nil {
		return true
	}
	uid, err := b.peerUID(conn)
	if errors.Is(err, errPeerGone) {
		return false
	}
	if err != nil {
		if b.log != nil {
			b.log.Debug("bridge: the owner of a connection is unknown; admitting it by its CONNECT alone", "error", err)
		}
		return true
	}
	return uid == b.uid || uid == 0
}

// errPeerGone is peerUID's answer for a connection whose client end is closed: the kernel
// knows no owner of it.
var errPeerGone = errors.New("peer uid: the client's socket is closed")

// admitted moves conn from pending to the tunnels, unless it was closed meanwhile or
// MaxBridgeConns tunnels are open; it reports which, with the refusal to send.
func (b *Bridge) admitted(conn net.Conn) (refusal string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, waiting := b.waiting[conn]
	if !waiting {
		return "", false // pushed out of pending, and closed
	}
	b.pending.Remove(e)
	delete(b.waiting, conn)
	if len(b.tunnels) >= MaxBridgeConns {
		return "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", false
	}
	b.tunnels[conn] = struct{}{}
	return "", true
}

// forget removes conn from whichever set holds it.
func (b *Bridge) forget(conn net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.waiting[conn]; ok {
		b.pending.Remove(e)
		delete(b.waiting, conn)
	}
	delete(b.tunnels, conn)
}

// tunnel answers one CONNECT and copies bytes both ways until either side closes.
func (b *Bridge) tunnel(client net.Conn) {
	defer client.Close()
	defer b.forget(client)
	_ = client.SetDeadline(time.Now().Add(connectTimeout))
	header := &io.LimitedReader{R: client, N: maxConnectHeader}
	br := bufio.NewReader(header)
	if refusal := b.admit(br); refusal != "" {
		_, _ = io.WriteString(client, refusal)
		return
	}
	if refusal, ok := b.admitted(client); !ok {
		_, _ = io.WriteString(client, refusal)
		return
	}
	header.N = math.MaxInt64 // the tunnel's bytes
	_ = client.SetDeadline(time.Time{})
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
