package sidecar

import (
	"io"
	"net/http"
	"testing"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
)

// benchGet sends GET url with client until the benchmark ends.
func benchGet(b *testing.B, client *http.Client, url string) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, url, nil)
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
	c := newTestCluster(b, discoverytest.Document("/v1/pods", "batch/v1/jobs"), discoverytest.Document("/v1/pods"))
	client := c.httpClient(b, nil, tokenBob)
	const jobs = "/apis/batch/v1/namespaces/default/jobs"
	b.Run("local/direct", func(b *testing.B) { benchGet(b, client, c.nodes[0].backend.srv.URL+jobs) })
	b.Run("local/sidecar", func(b *testing.B) { benchGet(b, client, c.nodes[0].srv.URL+jobs) })
	b.Run("proxied/direct-to-peer", func(b *testing.B) { benchGet(b, client, c.nodes[0].srv.URL+jobs) })
	b.Run("proxied/sidecar", func(b *testing.B) { benchGet(b, client, c.nodes[1].srv.URL+jobs) })
}
