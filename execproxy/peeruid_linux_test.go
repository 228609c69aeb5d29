//go:build linux

package execproxy

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
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
