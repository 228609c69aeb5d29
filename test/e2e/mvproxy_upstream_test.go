package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/test/e2e/framework"
)

// TestMixedVersionProxyUpstream runs the sidecar test's scenario against kube-apiserver's
// own mixed version proxy (feature gate on, with --peer-ca-file and the proxy client
// flags), to record where it behaves differently (docs/mixed-version-proxy.md).
func TestMixedVersionProxyUpstream(t *testing.T) {
	gate := map[string]bool{"UnknownVersionInteroperabilityProxy": true}
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{
		{FeatureGates: gate},
		{FeatureGates: gate, Flags: []string{"--runtime-config=batch/v1=false"}},
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	admin := userClient(t, cp, cp.Admin)
	b := cp.Servers[1].URL

	eventually(ctx, t, "jobs through the server without batch/v1", func() error {
		return expectStatus(ctx, admin, b+jobsPath, nil, http.StatusOK)
	})
	merged := discoveryGroups(ctx, t, admin, b, acceptAggregated)
	local := discoveryGroups(ctx, t, admin, b, acceptAggregated+";profile=nopeer")
	if !slices.Contains(merged, "batch") || slices.Contains(local, "batch") {
		t.Errorf("upstream discovery: merged %v, nopeer %v", merged, local)
	}
	// profile=local (the KEP's name) gets the merged document upstream, as from kplug.
	if got := discoveryGroups(ctx, t, admin, b, acceptAggregated+";profile=local"); !slices.Contains(got, "batch") {
		t.Errorf("upstream profile=local: %v, expected the merged document", got)
	}
	// The token user is forwarded as itself (front-proxy headers).
	code, body := get(ctx, t, userClient(t, cp, cp.TokenUser), b+jobsPath, nil)
	if code != http.StatusForbidden || !strings.Contains(body, `User \"bob\"`) {
		t.Errorf("upstream, token user: %d %s", code, body)
	}
	// Difference: a client's guard header turns proxying off upstream, giving a 404.
	code, body = get(ctx, t, admin, b+jobsPath, http.Header{"X-Kubernetes-Peer-Proxied": {"true"}})
	if code != http.StatusNotFound {
		t.Errorf("upstream with a client-sent guard header: %d %.200s, expected 404", code, body)
	}
	// Upstream gap (docs/mixed-version-proxy.md, "Upstream gaps"): a capable server that
	// shuts down gracefully deletes its identity Lease (kubernetes/kubernetes PR #134514),
	// so its peer no longer knows anyone serves jobs and answers 404, a wrong one for a
	// resource the cluster serves again once the server is back. (Until the peer notices,
	// it answers a plain-text 503.) The sidecar answers 503 with a Status throughout
	// (TestMixedVersionProxySidecar), as its Lease outlives its apiserver's restart.
	cp.Servers[0].Stop()
	eventually(ctx, t, "upstream's 404 for jobs with the capable server stopped gracefully", func() error {
		code, body, err := do(ctx, admin, b+jobsPath, nil)
		if err != nil {
			return err
		}
		if code != http.StatusNotFound {
			return fmt.Errorf("%d %.200q", code, body)
		}
		return nil
	})
	if err := cp.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "jobs through server 1 after server 0 returned", func() error {
		return expectStatus(ctx, admin, b+jobsPath, nil, http.StatusOK)
	})
}
