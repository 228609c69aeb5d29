package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/test/e2e/framework"
)

// TestMixedVersionProxyPassesWhatKubeApiserverAccepts (issue 33 review 2, P1): a request
// whose header block the real kube-apiserver accepts over HTTP/1.1 passes through the
// sidecar, which speaks HTTP/2 upstream since issue 33. HTTP/2 counts 32 bytes more per
// field against the server's header list size (RFC 9113 §6.5.2) than HTTP/1.1 counts
// against its header bytes, so 15,000 fields of 58 bytes, 0.9 MiB on the wire, are 1.3
// MiB to Go's HTTP/2 client: it refused to send them, and the sidecar answered 503 "the
// local apiserver is unreachable" and marked its local discovery stale.
func TestMixedVersionProxyPassesWhatKubeApiserverAccepts(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{}}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	side := startSidecar(t, cp, 0)
	admin := userClient(t, cp, cp.Admin) // HTTP/1.1: its TLS configuration is its own
	const path = "/api/v1/namespaces/default/configmaps"
	eventually(ctx, t, "configmaps listed through the sidecar", func() error {
		return expectStatus(ctx, admin, side.URL+path, nil, http.StatusOK)
	})
	many := http.Header{}
	for i := range 15000 {
		many.Add(fmt.Sprintf("X-F%05d", i), strings.Repeat("v", 50))
	}
	code, body, err := do(ctx, admin, cp.Servers[0].URL+path, many)
	if err != nil || code != http.StatusOK {
		t.Fatalf("directly to kube-apiserver: %d %v %.300s", code, err, body)
	}
	code, body, err = do(ctx, admin, side.URL+path, many)
	if err != nil || code != http.StatusOK {
		t.Errorf("through the sidecar: %d %v %.300s; kube-apiserver itself answered 200", code, err, body)
	}
}
