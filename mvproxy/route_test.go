package mvproxy

import (
	"strings"
	"testing"
)

func TestRoute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   RouteInput
		want Target
	}{
		{"non-resource request goes local even unsynced", RouteInput{IsResource: false}, Local},
		{"already proxied goes local even if only a peer serves it", RouteInput{IsResource: true, Proxied: true, Synced: true, CapablePeers: 2}, Local},
		{"served locally goes local", RouteInput{IsResource: true, LocalServes: true, Synced: true, CapablePeers: 1}, Local},
		{"served locally goes local before peers synced", RouteInput{IsResource: true, LocalServes: true}, Local},
		{"unsynced and not local is not ready, not 404", RouteInput{IsResource: true}, NotReady},
		{"unsynced with a capable peer is still not ready", RouteInput{IsResource: true, CapablePeers: 1}, NotReady},
		{"only a peer serves it", RouteInput{IsResource: true, Synced: true, CapablePeers: 1}, Peer},
		{"no server serves it goes local for the 404", RouteInput{IsResource: true, Synced: true}, Local},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Route(tt.in); got.Target != tt.want {
				t.Errorf("Route(%+v) = %v (%s), want %v", tt.in, got.Target, got.Reason, tt.want)
			}
		})
	}
}

func TestResourceOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path string
		want GVR
		ok   bool
	}{
		{"/api/v1/pods", GVR{"", "v1", "pods"}, true},
		{"/api/v1/namespaces/default/pods/p1/log", GVR{"", "v1", "pods"}, true},
		{"/api/v1/namespaces", GVR{"", "v1", "namespaces"}, true},
		{"/api/v1/namespaces/ns1", GVR{"", "v1", "namespaces"}, true},
		{"/api/v1/namespaces/ns1/status", GVR{"", "v1", "namespaces"}, true},
		{"/api/v1/namespaces/ns1/finalize", GVR{"", "v1", "namespaces"}, true},
		{"/api/v1/watch/namespaces/ns1/configmaps", GVR{"", "v1", "configmaps"}, true},
		{"/apis/batch/v1/jobs", GVR{"batch", "v1", "jobs"}, true},
		{"/apis/batch/v1/namespaces/default/jobs/j/status", GVR{"batch", "v1", "jobs"}, true},
		{"/apis/batch/v1/watch/jobs", GVR{"batch", "v1", "jobs"}, true},
		{"/apis/batch/v1/namespaces/default/jobs", GVR{"batch", "v1", "jobs"}, true},
		{"/apis/apps/v1/proxy/namespaces/default/deployments/d", GVR{"apps", "v1", "deployments"}, true},
		{"/apis", GVR{}, false},
		{"/apis/batch", GVR{}, false},
		{"/apis/batch/v1", GVR{}, false},
		{"/apis/batch/v1/", GVR{}, false},
		{"/api", GVR{}, false},
		{"/api/v1", GVR{}, false},
		{"/apis/batch/v1/watch", GVR{}, false},
		{"/healthz", GVR{}, false},
		{"/openapi/v3/apis/batch/v1", GVR{}, false},
		{"/version", GVR{}, false},
		{"", GVR{}, false},
	}
	for _, tt := range tests {
		got, ok := ResourceOf(tt.path)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ResourceOf(%q) = %v, %v; want %v, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
}

func TestSubresourceOf(t *testing.T) {
	t.Parallel()
	tests := []struct{ path, sub string }{
		{"/api/v1/namespaces/default/pods/p1/log", "log"},
		{"/api/v1/namespaces/default/pods/p1/ephemeralcontainers", "ephemeralcontainers"},
		{"/api/v1/namespaces/ns1/status", "status"},
		{"/api/v1/namespaces/ns1", ""},
		{"/api/v1/nodes/n1/proxy/metrics", "proxy"},
		{"/api/v1/proxy/namespaces/default/pods/p1/extra", ""},
		{"/apis/batch/v1/watch/namespaces/default/jobs/j1", ""},
		{"/apis/batch/v1/namespaces/default/jobs/j1", ""},
	}
	for _, tt := range tests {
		if _, sub, ok := resourceOf(tt.path); !ok || sub != tt.sub {
			t.Errorf("resourceOf(%q) subresource %q, %v; want %q", tt.path, sub, ok, tt.sub)
		}
	}
}

func TestNegotiateDiscovery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		accept string
		want   discoveryAnswer
	}{
		{"", answerPassThrough},
		{"application/json", answerPassThrough},
		{"application/json;foo=bar", answerPassThrough},
		{AcceptAggregated, answerMerged},
		{AcceptAggregated + ",application/json", answerMerged},
		// client-go 1.30 to 1.36
		{AcceptAggregated + ",application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", answerMerged},
		{AcceptNoPeer, answerLocal},
		{AcceptAggregated + ";profile=local", answerLocal},
		{AcceptAggregated + ";profile=foo", answerMerged},
		// the apiserver's own loopback client
		{AcceptNoPeer + "," + AcceptAggregated + ",application/json", answerLocal},
		// spaces and quality, as in the KEP's example
		{"application/json; q=0.5, application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList; q=0.9", answerMerged},
		{"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0, application/json", answerPassThrough},
		{"application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList," + AcceptAggregated, answerPassThrough},
		{"application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList", answerPassThrough},
		{"text/html, " + AcceptAggregated, answerMerged},
	}
	for _, tt := range tests {
		if got, err := negotiateDiscovery(tt.accept); got != tt.want || err != nil {
			t.Errorf("negotiateDiscovery(%q) = %v, %v; want %v", tt.accept, got, err, tt.want)
		}
	}
}

// FuzzNegotiateDiscovery: any Accept header is answered without panic; within the bounds,
// a leading aggregated clause of quality 1 decides, whatever follows.
func FuzzNegotiateDiscovery(f *testing.F) {
	for _, seed := range []string{
		"", "application/json", AcceptAggregated + ",application/json", AcceptNoPeer,
		"application/json; q=0.5, application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList; q=0.9",
		"application/json;q=2,text/html;q=NaN", strings.Repeat("a/b,", 40), ";;,=;q",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		_, err := negotiateDiscovery(accept)
		within := len(accept) <= maxAcceptBytes && strings.Count(accept, ",")+1 <= maxMediaRanges
		if (err == nil) != within {
			t.Fatalf("%d bytes, %d ranges: error %v", len(accept), strings.Count(accept, ",")+1, err)
		}
		for prefix, want := range map[string]discoveryAnswer{AcceptNoPeer: answerLocal, AcceptAggregated: answerMerged} {
			h := prefix + "," + accept
			got, err := negotiateDiscovery(h)
			if len(h) > maxAcceptBytes || strings.Count(h, ",")+1 > maxMediaRanges {
				if err == nil {
					t.Fatalf("%q over the bounds accepted", h)
				}
				continue
			}
			if got != want || err != nil {
				t.Fatalf("negotiateDiscovery(%q) = %v, %v; want %v", h, got, err, want)
			}
		}
	})
}
