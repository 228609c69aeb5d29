package mvproxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// BenchmarkMergedDiscovery builds the merged /apis document of 3 servers with 100 groups
// each, and serves it from the cache.
func BenchmarkMergedDiscovery(b *testing.B) {
	servers := []discovery.ServerGroups{{ID: "a", Groups: discoverytest.Groups(0, 100, 5)}, {ID: "b", Groups: discoverytest.Groups(1, 100, 5)}, {ID: "c", Groups: discoverytest.Groups(2, 100, 5)}}
	b.Run("build", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := discovery.Encode(discovery.Merge(servers[0].Groups, servers[1:])); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		dir := NewDirectory("a")
		dir.SetLocal(discovery.NewDocument(servers[0].Groups, nil))
		dir.MarkPeersSynced()
		for _, s := range servers[1:] {
			dir.SetPeer(PeerInfo{ID: s.ID, Address: "127.0.0.1:1", Holder: "h"})
			dir.SetPeerDocument(s.ID, "h", discovery.NewDocument(s.Groups, nil))
		}
		localBody, localETag, _ := discovery.Encode(servers[0].Groups)
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
			req := httptest.NewRequestWithContext(b.Context(), http.MethodGet, "/apis", nil)
			req.Header.Set("Accept", discovery.AcceptAggregated)
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
	dir.SetLocal(discoverytest.Document("/v1/pods", "batch/v1/jobs"))
	dir.MarkPeersSynced()
	local := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"without", local}, {"with", newFilter(b, dir, local)}} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequestWithContext(b.Context(), http.MethodGet, "/apis/batch/v1/namespaces/default/jobs", nil)
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
