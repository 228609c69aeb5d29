package reverseproxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstream is a TLS server that offers HTTP/2 and HTTP/1.1, as kube-apiserver does. It
// answers with the protocol of the request, switches to an echo protocol on an upgrade
// (possible over HTTP/1.1 only), and holds /hang open after its headers until the
// client goes away.
func upstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Upgrade") == "test-echo":
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				http.Error(w, "cannot upgrade over "+r.Proto, http.StatusBadRequest)
				return
			}
			defer conn.Close()
			fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test-echo\r\n\r\n")
			_ = rw.Flush()
			line, _ := rw.ReadString('\n')
			fmt.Fprintf(rw, "%s echoes %s", r.Proto, line)
			_ = rw.Flush()
		case r.URL.Path == "/hang":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			_, _ = io.WriteString(w, r.Proto)
		}
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func clientTLS(srv *httptest.Server) *tls.Config {
	return &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, MinVersion: tls.VersionTLS12}
}

// TestUpstreamTransportProtocols: a proxy with an UpstreamTransport sends what does not
// upgrade over HTTP/2 and an upgrade over HTTP/1.1, which then works end to end.
func TestUpstreamTransportProtocols(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	target, _ := url.Parse(up.URL)
	tr := NewUpstreamTransport(clientTLS(up), 5*time.Second)
	t.Cleanup(tr.CloseIdleConnections)
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: tr,
	})
	t.Cleanup(proxy.Close)

	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req, _ := http.NewRequestWithContext(t.Context(), method, proxy.URL+"/api/v1/pods", strings.NewReader("body"))
		resp, err := proxy.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(b) != "HTTP/2.0" {
			t.Errorf("%s reached the upstream over %q, want HTTP/2.0", method, b)
		}
	}

	conn, err := net.Dial("tcp", proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/v1/namespaces/ns/pods/p/exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test-echo\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: status %d, want 101", resp.StatusCode)
	}
	fmt.Fprintf(conn, "hello\n")
	if line, err := r.ReadString('\n'); err != nil || line != "HTTP/1.1 echoes hello\n" {
		t.Errorf("upgraded connection: %q, %v; want the upstream's echo over HTTP/1.1", line, err)
	}
}

// freezer relays TCP connections to a server until frozen; then it forwards nothing
// more in either direction and holds the connections open, as a server that hangs
// (SIGSTOP) or a machine that is gone does.
type freezer struct {
	ln     net.Listener
	target string
	frozen chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, frozen: make(chan struct{})}
	f.wg.Go(f.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			_ = c.Close()
		}
		f.mu.Unlock()
		f.freeze()
		f.wg.Wait()
	})
	return f
}

func (f *freezer) freeze() { f.once.Do(func() { close(f.frozen) }) }

func (f *freezer) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", f.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, s)
		f.mu.Unlock()
		f.wg.Go(func() { f.relay(s, c) })
		f.wg.Go(func() { f.relay(c, s) })
	}
}

// relay copies from src to dst until frozen; a read in progress when it freezes
// is dropped.
func (f *freezer) relay(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-f.frozen:
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Issue 33: one HTTP/2 connection carries many requests, so a server that stops
// answering without closing it must be noticed, or every request on it hangs as long
// as its client waits. The transport pings a connection that received nothing for a
// while and drops it when the ping goes unanswered: a stream in progress ends with an
// error and a new request fails (the proxies answer 503 for both).
func TestUpstreamTransportDropsAHungServer(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	f := newFreezer(t, up.Listener.Addr().String())
	tr := NewUpstreamTransport(clientTLS(up), 200*time.Millisecond)
	t.Cleanup(tr.CloseIdleConnections)
	base := "https://" + f.ln.Addr().String()

	stream := get(t, tr, base+"/hang")
	defer stream.Body.Close()
	if stream.ProtoMajor != 2 {
		t.Fatalf("the stream went over %s, want HTTP/2", stream.Proto)
	}
	f.freeze()

	ended := make(chan error, 1)
	go func(body io.Reader) {
		_, err := io.Copy(io.Discard, body)
		ended <- err
	}(stream.Body)
	select {
	case err := <-ended:
		if err == nil {
			t.Error("the stream on the hung server's connection ended cleanly, want an error")
		}
	case <-time.After(time.Minute): // a hang, not a speed: the health check takes 0.6 s
		t.Fatal("the stream on the hung server's connection still runs a minute later")
	}

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/api/v1/pods", nil)
	done := make(chan error, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		if err == nil {
			_ = resp.Body.Close()
			err = errors.New(resp.Status)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !strings.Contains(err.Error(), "timeout") {
			t.Errorf("a new request to the hung server: %v, want a TLS handshake timeout", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a new request to the hung server still waits a minute later")
	}
}

// get sends a GET to url with tr and returns the response.
func get(t *testing.T, tr http.RoundTripper, url string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestIsStream(t *testing.T) {
	t.Parallel()
	for target, want := range map[string]bool{
		"/api/v1/pods":                                 false,
		"/api/v1/pods?watch=true":                      true,
		"/api/v1/pods?watch=1":                         true,
		"/api/v1/pods?watch=True&resourceVersion=5":    true,
		"/api/v1/pods?watch=false":                     false,
		"/api/v1/pods?watch=0":                         false,
		"/api/v1/pods?watch=FALSE&watch=true":          false, // kube-apiserver reads the first
		"/api/v1/watch/namespaces/ns/pods":             true,
		"/api/v1/namespaces/ns/pods/p/log?follow=true": true,
		"/api/v1/namespaces/ns/pods/p/log?follow=no":   false,
		"/apis/example.com/v1/watchers":                false,
	} {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		if got := IsStream(r); got != want {
			t.Errorf("IsStream(%s) = %v, want %v", target, got, want)
		}
	}
}
