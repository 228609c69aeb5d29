package server

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connTracker counts the proxy's open connections, upgraded streams (exec, attach,
// port-forward) included, for two jobs: the idle timeout, which runs only while nothing
// is open, and closing upgraded streams when Serve stops, since http.Server forgets a
// connection once it is hijacked.
type connTracker struct {
	mu       sync.Mutex
	open     int
	hijacked map[net.Conn]struct{}
	timeout  time.Duration
	timer    *time.Timer // nil without an idle timeout
}

func newConnTracker(idleTimeout time.Duration, onIdle func()) *connTracker {
	t := &connTracker{hijacked: map[net.Conn]struct{}{}, timeout: idleTimeout}
	if idleTimeout > 0 {
		t.timer = time.AfterFunc(idleTimeout, onIdle)
	}
	return t
}

// connState is the http.Server hook. A hijacked connection stays open until
// hijackedClosed reports it.
func (t *connTracker) connState(c net.Conn, state http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch state {
	case http.StateNew:
		t.open++
		if t.timer != nil {
			t.timer.Stop()
		}
	case http.StateHijacked:
		t.hijacked[c] = struct{}{}
	case http.StateClosed:
		t.closed()
	}
}

// hijackedClosed is called once when an upgraded stream's client connection closes.
func (t *connTracker) hijackedClosed(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.hijacked[c]; !ok {
		return
	}
	delete(t.hijacked, c)
	t.closed()
}

func (t *connTracker) closed() {
	t.open--
	if t.open == 0 && t.timer != nil {
		t.timer.Reset(t.timeout)
	}
}

func (t *connTracker) stopTimer() {
	if t.timer != nil {
		t.timer.Stop()
	}
}

func (t *connTracker) closeHijacked() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.hijacked {
		_ = c.Close()
	}
}
