//go:build linux

package execproxy_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/internal/testkit/localuser"
	"github.com/kplug/kplug/internal/testkit/poll"
)

// deadBridge returns a bridge whose proxy is gone, and a count of the plugin runs it
// started to bring the proxy back.
func deadBridge(t *testing.T) (*execproxy.Bridge, *atomic.Int32) {
	t.Helper()
	var restarts atomic.Int32
	b, err := execproxy.NewBridge(filepath.Join(t.TempDir(), "gone.sock"), func(context.Context, string) (string, error) {
		restarts.Add(1)
		return "", fmt.Errorf("the plugin cannot start the proxy")
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, &restarts
}

// liveBridge returns a bridge to a stand-in proxy socket that accepts connections and
// keeps them open until the test ends.
func liveBridge(t *testing.T) *execproxy.Bridge {
	t.Helper()
	dir, err := os.MkdirTemp("", "kp") // short: a socket path is limited to about 100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "proxy.sock")
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					_ = c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	b, err := execproxy.NewBridge(socket, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		_ = ln.Close()
		<-done
	})
	return b
}

// openTunnel sends an authenticated CONNECT and returns the connection once the bridge
// answered, with the answer's status line.
func openTunnel(t *testing.T, b *execproxy.Bridge) (net.Conn, string) {
	t.Helper()
	c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(t.Context(), "tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT k:443 HTTP/1.1\r\nHost: k:443\r\nProxy-Authorization: %s\r\n\r\n", proxyAuthorization(b.ProxyURL()))
	status, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		_ = c.Close()
		return nil, err.Error()
	}
	_ = c.SetDeadline(time.Time{})
	return c, strings.TrimSpace(status)
}

// TestSecurityBridgeRefusesOtherUsers: another local user reaches the loopback bridge of
// `kplug run`, but the bridge refuses the connection before it touches the proxy, by the
// uid the kernel records for the other user's socket, even with the run's secret: no
// tunnel, no plugin run to restart a proxy.
// Issue 12 finding 12: the bridge served every local user's connections.
func TestSecurityBridgeRefusesOtherUsers(t *testing.T) {
	b, restarts := deadBridge(t)
	u := localuser.New(t)
	bin := u.Executable(t, os.Args[0])
	guess := proxyAuthorization(b.ProxyURL())
	guess = guess[:len(guess)-4] + "AAA=" // the right user name, a wrong secret
	for _, auth := range []string{"", guess, "Bearer x", proxyAuthorization(b.ProxyURL())} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		cmd := u.Command(ctx, bin)
		cmd.Env = append(cmd.Env, connectEnv+"="+b.Addr, "CONNECT_AUTH="+auth)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("as %v: %v: %s", u, err, out)
		}
		if want := "HTTP/1.1 403 Forbidden"; string(out) != want {
			t.Errorf("CONNECT from %v with Proxy-Authorization %q: %q, want %q", u, auth, out, want)
		}
	}
	if n := restarts.Load(); n != 0 {
		t.Errorf("refused connections ran the plugin %d times", n)
	}
	// The bridge's own user without the secret is refused by the secret.
	if status, err := connect(t.Context(), b.Addr, guess); err != nil || status != "HTTP/1.1 407 Proxy Authentication Required" {
		t.Errorf("CONNECT with a wrong secret: %q, %v; want 407", status, err)
	}
	// The client that holds the secret gets through to the (dead) proxy, and only then is
	// the plugin run to restart it.
	status, err := connect(t.Context(), b.Addr, proxyAuthorization(b.ProxyURL()))
	if err != nil || status != "HTTP/1.1 502 Bad Gateway" || restarts.Load() != 1 {
		t.Errorf("CONNECT with the secret: %q, %v, %d plugin runs; want a 502 after one run", status, err, restarts.Load())
	}
}

// TestSecurityBridgeConnectionCap holds MaxBridgeConns tunnels open: the next tunnel is
// refused with 503, and once one closes, tunnels are served again.
// Issue 12 finding 12: the bridge accepted unlimited connections (file descriptors).
func TestSecurityBridgeConnectionCap(t *testing.T) {
	b := liveBridge(t)
	held := make([]net.Conn, 0, execproxy.MaxBridgeConns)
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for i := range execproxy.MaxBridgeConns {
		c, status := openTunnel(t, b)
		if status != "HTTP/1.1 200 Connection established" {
			t.Fatalf("tunnel %d: %q, want 200", i+1, status)
		}
		held = append(held, c)
	}
	if _, status := openTunnel(t, b); status != "HTTP/1.1 503 Service Unavailable" {
		t.Fatalf("tunnel %d: %q; want 503", execproxy.MaxBridgeConns+1, status)
	}
	_ = held[0].Close()
	poll.Until(t, "the bridge to serve again after a tunnel closed", func() bool {
		c, status := openTunnel(t, b)
		if c != nil {
			held[0] = c
		}
		return status == "HTTP/1.1 200 Connection established"
	})
}

// TestSecurityBridgeIdleConnectionsOfAnotherUser: another local user, who can see the
// bridge's port and its owner in /proc/net/tcp, holds more than MaxBridgeConns idle
// connections to it; the owner's client still gets its tunnel.
// Issue 27 N5: connections that had not sent the secret counted against the cap, so the
// other user's idle connections made every request of the owner fail with 503.
func TestSecurityBridgeIdleConnectionsOfAnotherUser(t *testing.T) {
	b := liveBridge(t)
	u := localuser.New(t)
	bin := u.Executable(t, os.Args[0])
	const n = 2 * execproxy.MaxBridgeConns
	cmd := u.Command(t.Context(), bin)
	cmd.Env = append(cmd.Env, holdEnv+"="+b.Addr, "HOLD_N="+strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if want := fmt.Sprintf("held %d\n", n); err != nil || line != want {
		t.Fatalf("%v opening connections: %q, %v; want %q", u, line, err, want)
	}
	// The bridge accepts in order: the owner's connection comes after all of the others.
	c, status := openTunnel(t, b)
	if c != nil {
		defer c.Close()
	}
	if status != "HTTP/1.1 200 Connection established" {
		t.Errorf("the owner's CONNECT while %v holds %d idle connections: %q, want 200", u, n, status)
	}
}

// TestSecurityBridgeIdleConnectionsWithoutTheSecret holds more idle connections than
// the bridge lets wait for their CONNECT, from the bridge's own user, as a client without
// the secret could where the OS does not tell who opened a connection: the owner's
// client, which sends its CONNECT at once, still gets its tunnel.
// Issue 27 N5: connections that had not sent the secret counted against the cap.
func TestSecurityBridgeIdleConnectionsWithoutTheSecret(t *testing.T) {
	b := liveBridge(t)
	n := execproxy.MaxPending + execproxy.MaxBridgeConns
	held := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for range n {
		c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	c, status := openTunnel(t, b)
	if c != nil {
		defer c.Close()
	}
	if status != "HTTP/1.1 200 Connection established" {
		t.Errorf("the owner's CONNECT after %d idle connections: %q, want 200", n, status)
	}
}
