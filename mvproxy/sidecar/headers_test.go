package sidecar

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestSidecarPassesHeadersTheApiserverAccepts (issue 33 review 2, P1): a request whose
// header block the apiserver accepts over HTTP/1.1 (under kube-apiserver's 1 MiB) reaches
// it through the sidecar. Since issue 33 the sidecar sends it over HTTP/2, which counts 32
// bytes more per field against the server's header list size: Go's client refused 12,000
// fields of 58 bytes (750 KiB on the wire), and the sidecar answered 503 "the local
// apiserver is unreachable" and marked its local discovery stale, which any client,
// anonymous too, could do at will.
func TestSidecarPassesHeadersTheApiserverAccepts(t *testing.T) {
	c := twoServers(t)
	alice := clientCert(t, c.clientCA, "alice", "developers")
	client := c.httpClient(t, &alice, "")
	tr := client.Transport.(*http.Transport)
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1, as such a client would
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, c.nodes[1].srv.URL+"/apis/apps/v1/deployments", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12000 {
		req.Header.Add(fmt.Sprintf("X-F%05d", i), strings.Repeat("v", 50))
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("12,000 header fields, 750 KiB: %s %.300s; want 200 from the apiserver", resp.Status, body)
	}
	if c.nodes[1].sidecar.dir.LocalStale() {
		t.Error("a client's request marked the local apiserver's discovery stale")
	}
}
