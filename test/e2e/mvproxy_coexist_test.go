package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/kplug/kplug/test/e2e/framework"
)

const (
	builtinProxyGate = "UnknownVersionInteroperabilityProxy"
	hpaV2Path        = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers"
)

// TestMixedVersionProxyCoexistence puts the sidecars in front of a cluster where one
// kube-apiserver has its own mixed version proxy on (peer CA set, as 1.36 does by
// default) and serves no batch/v1, and the other has it off and serves no autoscaling/v2,
// and checks both directions: a request goes through at most one proxy hop (the
// receiving sidecar passes the guard header on, and kube-apiserver's own proxy honours it
// and does not proxy again), and the sidecar merges discovery once, from each
// apiserver's own (profile=nopeer) document, not from the built-in proxy's merge.
func TestMixedVersionProxyCoexistence(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{
		{FeatureGates: map[string]bool{builtinProxyGate: true}, Flags: []string{"--runtime-config=batch/v1=false"}},
		{Flags: []string{"--runtime-config=autoscaling/v2=false"}},
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	sides := []*sidecar{startSidecar(t, cp, 0), startSidecar(t, cp, 1)}
	admin := userClient(t, cp, cp.Admin)

	// Built-in proxy's server without batch, through its sidecar: the sidecar sends jobs to
	// the peer sidecar, whose apiserver serves them.
	eventually(ctx, t, "jobs through the sidecar of the server with the built-in proxy", func() error {
		return expectStatus(ctx, admin, sides[0].URL+jobsPath, nil, http.StatusOK)
	})
	// The other way: autoscaling/v2 through the sidecar of the server without its own
	// proxy reaches the server with it, which serves it without proxying further.
	eventually(ctx, t, "HPAs through the sidecar of the server without the built-in proxy", func() error {
		return expectStatus(ctx, admin, sides[1].URL+hpaV2Path, nil, http.StatusOK)
	})

	before := scrapeRerouted(ctx, t, admin, cp.Servers[0].URL)
	for range 5 {
		for _, path := range []string{jobsPath, hpaV2Path} {
			for i := range sides {
				if err := expectStatus(ctx, admin, sides[i].URL+path, nil, http.StatusOK); err != nil {
					t.Errorf("through sidecar %d: %v", i, err)
				}
			}
		}
	}
	if after := scrapeRerouted(ctx, t, admin, cp.Servers[0].URL); after != before {
		t.Errorf("kube-apiserver's own proxy rerouted %v requests that came through the sidecars, want none (one hop)", after-before)
	}
	// A request straight to the server with the built-in proxy is still proxied by it.
	if err := expectStatus(ctx, admin, cp.Servers[0].URL+jobsPath, nil, http.StatusOK); err != nil {
		t.Errorf("jobs straight to apiserver-0 (its own proxy): %v", err)
	}
	if after := scrapeRerouted(ctx, t, admin, cp.Servers[0].URL); after != before+1 {
		t.Errorf("kube-apiserver's own proxy rerouted %v requests sent to it directly, want 1", after-before)
	}

	// A request a peer sidecar proxied (front-proxy certificate, guard header) is served by
	// the local apiserver only: the sidecar passes the guard on and kube-apiserver's own
	// proxy honours it, answering 404 for jobs rather than proxying a second hop.
	peer := peerClient(t, cp)
	hdr := http.Header{"X-Kubernetes-Peer-Proxied": {"true"}, "X-Remote-User": {cp.Admin.Name}, "X-Remote-Group": {"system:masters"}}
	before = scrapeRerouted(ctx, t, admin, cp.Servers[0].URL)
	if code, body := get(ctx, t, peer, sides[0].URL+jobsPath, hdr); code != http.StatusNotFound {
		t.Errorf("a peer-proxied request for jobs at sidecar 0: %d %.200s, want apiserver-0's own 404", code, body)
	}
	if after := scrapeRerouted(ctx, t, admin, cp.Servers[0].URL); after != before {
		t.Errorf("kube-apiserver's own proxy proxied a request a peer sidecar had proxied (%v)", after-before)
	}

	// Discovery: each sidecar lists every group once; the built-in proxy's merged
	// document is not what the sidecar merges from.
	for i, s := range sides {
		groups := discoveryGroups(ctx, t, admin, s.URL, acceptAggregated)
		if !slices.Contains(groups, "batch") || !slices.Contains(groups, "autoscaling") {
			t.Errorf("sidecar %d: merged groups %v lack batch or autoscaling", i, groups)
		}
		if dup := duplicates(groups); len(dup) > 0 {
			t.Errorf("sidecar %d: groups listed twice: %v", i, dup)
		}
	}
	local := discoveryGroups(ctx, t, admin, sides[0].URL, acceptAggregated+";profile=nopeer")
	builtinMerged := discoveryGroups(ctx, t, admin, cp.Servers[0].URL, acceptAggregated)
	if slices.Contains(local, "batch") || !slices.Contains(builtinMerged, "batch") {
		t.Errorf("apiserver-0 through its sidecar with profile=nopeer lists %v (want no batch); its own merge %v (want batch)", local, builtinMerged)
	}
}

// peerClient presents the front-proxy client certificate, as a peer sidecar does.
func peerClient(t *testing.T, cp *framework.ControlPlane) *http.Client {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(cp.PKI.ProxyClient.CertFile, cp.PKI.ProxyClient.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cp.PKI.ClusterCA.Pool(), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// scrapeRerouted is kube-apiserver's apiserver_rerouted_request_total, summed.
func scrapeRerouted(ctx context.Context, t *testing.T, c *http.Client, server string) float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server+"/metrics", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s/metrics: %s", server, resp.Status)
	}
	return sumSamples(t, string(body), "apiserver_rerouted_request_total", "")
}

func duplicates(names []string) []string {
	seen, dup := map[string]bool{}, []string{}
	for _, n := range names {
		if seen[n] {
			dup = append(dup, n)
		}
		seen[n] = true
	}
	return dup
}
