package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	kubectlproxy "k8s.io/kubectl/pkg/proxy"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/execproxy/server"
)

// The exec proxy benchmarks send the same requests to one loopback upstream directly,
// through `kubectl proxy` (k8s.io/kubectl's proxy server, the nearest upstream tool), and
// through kplug's exec proxy (unix socket, mutual TLS, CONNECT bridge).

type watchUpstream struct {
	*httptest.Server
	events chan struct{}
}

func newWatchUpstream(b *testing.B) *watchUpstream {
	u := &watchUpstream{events: make(chan struct{})}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/api/v1/watch/pods" {
			_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
			return
		}
		flusher := http.NewResponseController(w)
		_ = flusher.Flush()
		for {
			select {
			case <-u.events:
				fmt.Fprintf(w, `{"type":"ADDED","sent":%d}`+"\n", time.Now().UnixNano())
				_ = flusher.Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	u.EnableHTTP2 = true
	u.StartTLS()
	b.Cleanup(u.Close)
	return u
}

func (u *watchUpstream) restConfig() *rest.Config {
	return &rest.Config{Host: u.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: u.Certificate().Raw}),
	}}
}

// path is how each client reaches the upstream: a base URL and an HTTP client.
type path struct {
	name   string
	base   string
	client *http.Client
}

func paths(b *testing.B, u *watchUpstream) []path {
	direct, err := rest.HTTPClientFor(u.restConfig())
	if err != nil {
		b.Fatal(err)
	}
	return []path{
		{"direct", u.URL, direct},
		kubectlProxyPath(b, u),
		kplugProxyPath(b, u),
	}
}

func kubectlProxyPath(b *testing.B, u *watchUpstream) path {
	srv, err := kubectlproxy.NewServer("", "/", "/static/", nil, u.restConfig(), 0, false)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := srv.Listen("127.0.0.1", 0)
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.ServeOnListener(ln) }()
	b.Cleanup(func() { _ = ln.Close() })
	return path{"kubectl-proxy", "http://" + ln.Addr().String(), &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}}
}

func kplugProxyPath(b *testing.B, u *watchUpstream) path {
	return path{"kplug-exec-proxy", u.URL, startKplugProxy(b, u.restConfig(), nil)}
}

// startKplugProxy serves a kplug exec proxy to upstream, with the options mutate sets,
// and returns a client that reaches upstream through it.
func startKplugProxy(b testing.TB, upstream *rest.Config, mutate func(*server.Options)) *http.Client {
	dir, err := os.MkdirTemp("", "kpb") // short: unix socket paths are limited
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	lock, err := execproxy.NewLock(filepath.Join(dir, "client"))
	if err != nil {
		b.Fatal(err)
	}
	ready := make(chan *execcred.Status, 1)
	// Serve runs until the Cleanup below stops it, after its clients: not when the
	// benchmark's context ends.
	ctx, cancel := context.WithCancel(context.WithoutCancel(b.Context()))
	done := make(chan error, 1)
	o := server.Options{
		Upstream: upstream, LockFilePath: lock.Path, SocketDir: filepath.Join(dir, "proxy"),
		Ready: func(s *execcred.Status) { ready <- s },
	}
	if mutate != nil {
		mutate(&o)
	}
	go func() { done <- server.Serve(ctx, o) }()
	var status *execcred.Status
	select {
	case status = <-ready:
	case err := <-done:
		b.Fatalf("Serve: %v", err)
	}
	out, err := json.Marshal(execcred.ExecCredential{Kind: execcred.Kind, APIVersion: execcred.V1, Spec: struct{}{}, Status: status})
	if err != nil {
		b.Fatal(err)
	}
	cred, err := execcred.DecodeOutput(execcred.V1, out)
	if err != nil {
		b.Fatal(err)
	}
	session, err := execproxy.NewSession(&rest.Config{Host: upstream.Host}, cred)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := session.Config()
	if err != nil {
		b.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		client.CloseIdleConnections()
		session.Close()
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Serve: %v", err)
		}
		_ = lock.Close()
	})
	return client
}

// get sends one small GET through p and reads the whole answer.
func (p path) get(b testing.TB) {
	req, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, p.base+"/api/v1/pods", nil)
	resp, err := p.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// BenchmarkExecProxyRequest is one small GET per iteration, over kept-alive connections.
func BenchmarkExecProxyRequest(b *testing.B) {
	u := newWatchUpstream(b)
	for _, p := range paths(b, u) {
		b.Run(p.name, func(b *testing.B) {
			p.get(b)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				p.get(b)
			}
		})
	}
}

// BenchmarkExecProxyThroughput sends small GETs from 16 concurrent callers and reports
// requests per second.
func BenchmarkExecProxyThroughput(b *testing.B) {
	u := newWatchUpstream(b)
	for _, p := range paths(b, u) {
		b.Run(p.name, func(b *testing.B) {
			p.get(b)
			b.ReportAllocs()
			b.SetParallelism(8) // 8 per core
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p.get(b)
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}

// BenchmarkExecProxyWatchEvent measures how long a watch event takes from the upstream's
// write to the client's read (event-delay-µs), one event per iteration on one open watch.
func BenchmarkExecProxyWatchEvent(b *testing.B) {
	u := newWatchUpstream(b)
	for _, p := range paths(b, u) {
		b.Run(p.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(b.Context())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/api/v1/watch/pods", nil)
			resp, err := p.client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			var total time.Duration
			for b.Loop() {
				u.events <- struct{}{}
				line, err := r.ReadBytes('\n')
				if err != nil {
					b.Fatal(err)
				}
				var ev struct{ Sent int64 }
				if err := json.Unmarshal(line, &ev); err != nil {
					b.Fatalf("%q: %v", line, err)
				}
				total += time.Since(time.Unix(0, ev.Sent))
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "event-delay-µs")
		})
	}
}
