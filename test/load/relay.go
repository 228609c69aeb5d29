package load

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Relay is a TCP relay on loopback in front of a real server (an apiserver), which
// resets connections on demand: the fault of an upstream whose connections are torn down
// under requests in flight (a load balancer, a NAT table, a crashed host). It forwards
// bytes, TLS included, and reads nothing of them.
type Relay struct {
	// Addr is where the relay listens (127.0.0.1:port).
	Addr   string
	target string
	ln     net.Listener

	mu         sync.Mutex
	conns      map[*net.TCPConn]struct{}
	resetUntil time.Time
	resets     int
	wg         sync.WaitGroup
}

// NewRelay listens on a free loopback port and forwards each connection to target.
func NewRelay(target string) (*Relay, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*net.TCPConn]struct{}{}}
	r.wg.Go(r.serve)
	return r, nil
}

// Reset resets (TCP RST) every open connection, both ends, and for the next d every
// connection accepted. It returns how many connections it reset at once.
func (r *Relay) Reset(d time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resetUntil = time.Now().Add(d)
	n := 0
	for c := range r.conns {
		reset(c)
		n++
	}
	r.resets += n
	return n
}

// Resets is how many connections the relay has reset.
func (r *Relay) Resets() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resets
}

// reset closes c with SO_LINGER 0, which sends RST instead of FIN.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// Close stops accepting, resets what is open and waits for the relay's goroutines.
func (r *Relay) Close() {
	_ = r.ln.Close()
	r.Reset(0)
	r.wg.Wait()
}

func (r *Relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		client := c.(*net.TCPConn)
		r.mu.Lock()
		resetting := time.Now().Before(r.resetUntil)
		if resetting {
			r.resets++
		}
		r.mu.Unlock()
		if resetting {
			reset(client)
			continue
		}
		r.wg.Go(func() { r.forward(client) })
	}
}

func (r *Relay) forward(client *net.TCPConn) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", r.target)
	if err != nil {
		reset(client)
		return
	}
	upstream := c.(*net.TCPConn)
	if !r.track(client, upstream) {
		return
	}
	defer r.untrack(client, upstream)
	done := make(chan struct{}, 2)
	pipe := func(dst, src *net.TCPConn) {
		_, err := io.Copy(dst, src)
		if err == nil || errors.Is(err, net.ErrClosed) {
			_ = dst.CloseWrite() // pass an orderly close on
		}
		done <- struct{}{}
	}
	go pipe(upstream, client)
	go pipe(client, upstream)
	<-done
	<-done
}

func (r *Relay) track(cs ...*net.TCPConn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Now().Before(r.resetUntil) {
		for _, c := range cs {
			reset(c)
		}
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *Relay) untrack(cs ...*net.TCPConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.conns, c)
		_ = c.Close()
	}
}
