package mvproxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// benchGet sends GET url with client until the benchmark ends.
func benchGet(b *testing.B, client *http.Client, url string) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkRequest compares, over loopback TLS, a request sent to an apiserver (the
// test double) directly with the same request through the sidecar: served locally, and
// proxied to the peer that serves it.
func BenchmarkRequest(b *testing.B) {
	c := newTestCluster(b, doc("/v1/pods", "batch/v1/jobs"), doc("/v1/pods"))
	client := c.httpClient(b, nil, tokenBob)
	const jobs = "/apis/batch/v1/namespaces/default/jobs"
	b.Run("local/direct", func(b *testing.B) { benchGet(b, client, c.nodes[0].backend.srv.URL+jobs) })
	b.Run("local/sidecar", func(b *testing.B) { benchGet(b, client, c.nodes[0].srv.URL+jobs) })
	b.Run("proxied/direct-to-peer", func(b *testing.B) { benchGet(b, client, c.nodes[0].srv.URL+jobs) })
	b.Run("proxied/sidecar", func(b *testing.B) { benchGet(b, client, c.nodes[1].srv.URL+jobs) })
}

// BenchmarkMergedDiscovery builds the merged /apis document of 3 servers with 100 groups
// each, and serves it from the cache.
func BenchmarkMergedDiscovery(b *testing.B) {
	servers := []ServerGroups{{ID: "a", Groups: benchGroups(0, 100, 5)}, {ID: "b", Groups: benchGroups(1, 100, 5)}, {ID: "c", Groups: benchGroups(2, 100, 5)}}
	b.Run("build", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := encodeDiscovery(Merge(servers[0].Groups, servers[1:])); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		dir := NewDirectory("a")
		dir.SetLocal(NewDocument(servers[0].Groups, nil))
		dir.MarkPeersSynced()
		for _, s := range servers[1:] {
			dir.SetPeer(PeerInfo{ID: s.ID, Address: "127.0.0.1:1", Holder: "h"})
			dir.SetPeerDocument(s.ID, "h", NewDocument(s.Groups, nil))
		}
		localBody, localETag, _ := encodeDiscovery(servers[0].Groups)
		// The local handler as kube-apiserver's: 304 for its current ETag.
		local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", localETag)
			if r.Header.Get("If-None-Match") == localETag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			_, _ = w.Write(localBody)
		})
		h := newFilter(b, dir, local)
		b.ReportAllocs()
		for b.Loop() {
			rec := httptest.NewRecorder()
			req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/apis", nil)
			req.Header.Set("Accept", AcceptAggregated)
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("status %d", rec.Code)
			}
		}
	})
}

// BenchmarkFilter measures the filter alone on the local path: a locally served resource
// request with and without the Handler in front of the local handler.
func BenchmarkFilter(b *testing.B) {
	dir := NewDirectory("self")
	dir.SetLocal(doc("/v1/pods", "batch/v1/jobs"))
	dir.MarkPeersSynced()
	local := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"without", local}, {"with", newFilter(b, dir, local)}} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/apis/batch/v1/namespaces/default/jobs", nil)
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				bc.h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d", rec.Code)
				}
			}
		})
	}
}
