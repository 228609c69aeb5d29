//go:build linux

package execproxy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/internal/localuser"
	"github.com/kplug/kplug/internal/poll"
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

// TestSecurityBridgeRefusesOtherUsers: another local user reaches the loopback bridge of
// `kplug run`, but without the secret of the run's kubeconfig the bridge refuses the
// CONNECT before it touches the proxy: no tunnel, no plugin run to restart a proxy.
// Issue 12 finding 12: the bridge served every local user's connections.
func TestSecurityBridgeRefusesOtherUsers(t *testing.T) {
	b, restarts := deadBridge(t)
	u := localuser.New(t)
	bin := u.Executable(t, os.Args[0])
	guess := proxyAuthorization(b.ProxyURL())
	guess = guess[:len(guess)-4] + "AAA=" // the right user name, a wrong secret
	for _, auth := range []string{"", guess, "Bearer x"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := u.Command(ctx, bin)
		cmd.Env = append(cmd.Env, connectEnv+"="+b.Addr, "CONNECT_AUTH="+auth)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("as %v: %v: %s", u, err, out)
		}
		if want := "HTTP/1.1 407 Proxy Authentication Required"; string(out) != want {
			t.Errorf("CONNECT from %v with Proxy-Authorization %q: %q, want %q", u, auth, out, want)
		}
	}
	if n := restarts.Load(); n != 0 {
		t.Errorf("refused connections ran the plugin %d times", n)
	}
	// The client that holds the secret gets through to the (dead) proxy, and only then is
	// the plugin run to restart it.
	status, err := connect(b.Addr, proxyAuthorization(b.ProxyURL()))
	if err != nil || status != "HTTP/1.1 502 Bad Gateway" || restarts.Load() != 1 {
		t.Errorf("CONNECT with the secret: %q, %v, %d plugin runs; want a 502 after one run", status, err, restarts.Load())
	}
}

// TestSecurityBridgeConnectionCap holds MaxBridgeConns connections open without a request:
// the next connection is answered 503 at once, and once one closes, connections are served
// again.
// Issue 12 finding 12: the bridge accepted unlimited connections (file descriptors).
func TestSecurityBridgeConnectionCap(t *testing.T) {
	b, _ := deadBridge(t)
	held := make([]net.Conn, 0, execproxy.MaxBridgeConns)
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for range execproxy.MaxBridgeConns {
		c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// The bridge accepts in order: once the last held connection is in, the next is over.
	status, err := connect(b.Addr, "")
	if err != nil || status != "HTTP/1.1 503 Service Unavailable" {
		t.Fatalf("connection %d: %q, %v; want 503", execproxy.MaxBridgeConns+1, status, err)
	}
	_ = held[0].Close()
	poll.Until(t, "the bridge to serve again after a held connection closed", func() bool {
		status, _ = connect(b.Addr, "")
		return status == "HTTP/1.1 407 Proxy Authentication Required"
	})
}
