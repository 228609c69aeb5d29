package mvproxy

import (
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplug/kplug/internal/metrics"
	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// Issue 12 finding 3: label values from discovery are capped.
func TestSecurityMetricLabelsCapped(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("g", 1000)
	m.ProxyError(ErrorPeerUnreachable, discovery.GVR{Group: long, Version: long, Resource: long})
	m.reroutedRequest("200", discovery.GVR{Group: long, Version: long, Resource: long})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if len(l.GetValue()) > metrics.MaxLabelLength {
					t.Errorf("%s: label %s has %d bytes", f.GetName(), l.GetName(), len(l.GetValue()))
				}
			}
		}
	}
}

// Issue 12 finding 4: a large local discovery document came back gzipped when the client
// accepted gzip, and the merge answered 500. Both halves of the fix are checked: the
// local document is asked for without the client's Accept-Encoding, and gzip is decoded
// when the local server sends it anyway.
func TestSecurityMergedDiscoveryOfGzippedLocal(t *testing.T) {
	t.Parallel()
	local := discoverytest.Groups(0, 50, 0)
	body, etag, err := discovery.Encode(local)
	if err != nil {
		t.Fatal(err)
	}
	gzipped := func(w http.ResponseWriter) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = zw.Write(body)
		_ = zw.Close()
	}
	for name, handler := range map[string]http.HandlerFunc{
		// kube-apiserver: gzip for a client that accepts it, above 128 KiB
		"gzip when accepted": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", etag)
			if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				gzipped(w)
				return
			}
			_, _ = w.Write(body)
		},
		"gzip always": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("ETag", etag)
			gzipped(w)
		},
		// A coding the proxy does not decode, for a client that accepts it (curl
		// --compressed does): the proxy reads the local document itself, so the client's
		// Accept-Encoding must not choose the coding it has to read.
		"zstd when accepted": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", etag)
			if strings.Contains(r.Header.Get("Accept-Encoding"), "zstd") {
				w.Header().Set("Content-Encoding", "zstd")
				_, _ = w.Write([]byte("zstd frames the proxy cannot read"))
				return
			}
			_, _ = w.Write(body)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := NewDirectory("self")
			dir.SetLocal(discovery.NewDocument(local, nil))
			dir.MarkPeersSynced()
			dir.SetPeer(PeerInfo{ID: "peer", Address: "127.0.0.1:1", Holder: "h"})
			dir.SetPeerDocument("peer", "h", discoverytest.Document("x.example.com/v1/things"))
			h := newFilter(t, dir, handler)
			rec := httptest.NewRecorder()
			req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/apis", nil)
			req.Header.Set("Accept", discovery.AcceptAggregated)
			req.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("merged /apis: %d %s", rec.Code, rec.Body)
			}
			l, err := discovery.Parse(rec.Body.Bytes())
			if err != nil || len(l.Items) != len(local.Items)+1 {
				t.Errorf("merged /apis: %v, %d groups", err, len(l.Items))
			}
		})
	}
}

// Issue 12 finding 11: a 1 MiB Accept header on an anonymous GET /apis was parsed whole.
func TestSecurityAcceptHeaderBounded(t *testing.T) {
	t.Parallel()
	dir := NewDirectory("self")
	dir.SetLocal(discoverytest.Document("batch/v1/jobs"))
	dir.MarkPeersSynced()
	local := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := newFilter(t, dir, local)
	for name, accept := range map[string]string{
		"1 MiB":            discovery.AcceptAggregated + ";x=" + strings.Repeat("a", 1<<20),
		"many media types": strings.Repeat("a/b,", discovery.MaxMediaRanges) + discovery.AcceptAggregated,
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/apis", nil)
		req.Header.Set("Accept", accept)
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(rec.Body.String(), "send fewer media ranges") {
			t.Errorf("%s: %d %.300s", name, rec.Code, rec.Body)
		}
	}
	// What clients send is served.
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/apis", nil)
	req.Header.Set("Accept", discovery.AcceptAggregated+",application/json") // client-go 1.37 on
	h.ServeHTTP(rec, req)
	if rec.Code == http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("client-go's Accept refused: %s", rec.Body)
	}
}
