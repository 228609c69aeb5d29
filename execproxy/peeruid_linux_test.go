//go:build linux

package execproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestPeerUID asks the kernel who opened the other end of a loopback connection this
// process made: this process's user. A connection that is not IPv4 TCP is refused with
// a message naming it.
func TestPeerUID(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	uid, err := peerUID(server)
	if err != nil || int(uid) != os.Getuid() {
		t.Errorf("peerUID of our own connection: %d, %v; want %d", uid, err, os.Getuid())
	}

	// A client socket that is closed has no owner: the kernel reports uid 0 for it while
	// it waits out TIME_WAIT, which must not pass for root; once it is gone, the kernel
	// finds nothing.
	_ = client.Close()
	_ = server.Close()
	if _, err = peerUID(server); err == nil || err.Error() != "peer uid: the client's socket is closed" && !errors.Is(err, syscall.ENOENT) {
		t.Errorf("peerUID once the client closed: %v, want a closed socket", err)
	}

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := peerUID(a); err == nil || err.Error() != "peer uid: pipe to pipe is not an IPv4 TCP connection" {
		t.Errorf("peerUID of a pipe: %v", err)
	}
}

// TestSecurityBridgeRefusesClosedConnections: a connection whose client has already
// closed it (FIN) or reset it (RST) when the bridge accepts it is refused. The kernel
// reports uid 0 for a closed socket it still keeps (an orphan: FIN_WAIT2 here), which is
// nobody, not root; and finds no socket at all once it is reset.
// Issue 27 review of N5 (F2): only TIME_WAIT was taken for closed, so another user's
// connection closed at once passed as root's, and one reset was admitted by its CONNECT
// alone; either took a place among the connections waiting for their CONNECT.
func TestSecurityBridgeRefusesClosedConnections(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	b := &Bridge{peerUID: peerUID, uid: uint32(os.Getuid())}
	for _, tt := range []struct {
		name  string
		close func(*net.TCPConn) error
	}{
		{"open", nil},
		{"closed by the client", (*net.TCPConn).Close},
		{"reset by the client", func(c *net.TCPConn) error {
			if err := c.SetLinger(0); err != nil {
				return err
			}
			return c.Close()
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			if tt.close == nil {
				if !b.ownersConn(server) {
					t.Errorf("the bridge refuses a connection of its own user")
				}
				return
			}
			_, _ = client.Write([]byte("CONNECT k:443 HTTP/1.1\r\n"))
			if err := tt.close(client.(*net.TCPConn)); err != nil {
				t.Fatal(err)
			}
			// Once the server end has read to the end, the client's FIN or RST has arrived:
			// its socket is an orphan, or gone.
			_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, server); err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatal(err)
			}
			uid, err := peerUID(server)
			if b.ownersConn(server) {
				t.Errorf("the bridge admits a connection %s (its owner: uid %d, %v)", tt.name, uid, err)
			}
			if !errors.Is(err, errPeerGone) {
				t.Errorf("peerUID: uid %d, %v; want %v", uid, err, errPeerGone)
			}
		})
	}
}
