package mvproxy

import (
	"testing"

	"github.com/kplug/kplug/mvproxy/discovery"
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
		{"local stale: a capable peer serves what local discovery lists", RouteInput{IsResource: true, LocalServes: true, LocalStale: true, Synced: true, CapablePeers: 1}, Peer},
		{"local stale and no capable peer: 503, not a possibly wrong 404", RouteInput{IsResource: true, LocalStale: true, Synced: true}, LocalUnavailable},
		{"local stale, listed locally, no capable peer: 503", RouteInput{IsResource: true, LocalServes: true, LocalStale: true, Synced: true}, LocalUnavailable},
		{"local stale but already proxied by a peer goes local", RouteInput{IsResource: true, Proxied: true, LocalStale: true, CapablePeers: 1}, Local},
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
		want discovery.GVR
		ok   bool
	}{
		{"/api/v1/pods", gvr("", "v1", "pods"), true},
		{"/api/v1/namespaces/default/pods/p1/log", gvr("", "v1", "pods"), true},
		{"/api/v1/namespaces", gvr("", "v1", "namespaces"), true},
		{"/api/v1/namespaces/ns1", gvr("", "v1", "namespaces"), true},
		{"/api/v1/namespaces/ns1/status", gvr("", "v1", "namespaces"), true},
		{"/api/v1/namespaces/ns1/finalize", gvr("", "v1", "namespaces"), true},
		{"/api/v1/watch/namespaces/ns1/configmaps", gvr("", "v1", "configmaps"), true},
		{"/apis/batch/v1/jobs", gvr("batch", "v1", "jobs"), true},
		{"/apis/batch/v1/namespaces/default/jobs/j/status", gvr("batch", "v1", "jobs"), true},
		{"/apis/batch/v1/watch/jobs", gvr("batch", "v1", "jobs"), true},
		{"/apis/batch/v1/namespaces/default/jobs", gvr("batch", "v1", "jobs"), true},
		{"/apis/apps/v1/proxy/namespaces/default/deployments/d", gvr("apps", "v1", "deployments"), true},
		{"/apis", discovery.GVR{}, false},
		{"/apis/batch", discovery.GVR{}, false},
		{"/apis/batch/v1", discovery.GVR{}, false},
		{"/apis/batch/v1/", discovery.GVR{}, false},
		{"/api", discovery.GVR{}, false},
		{"/api/v1", discovery.GVR{}, false},
		{"/apis/batch/v1/watch", discovery.GVR{}, false},
		{"/healthz", discovery.GVR{}, false},
		{"/openapi/v3/apis/batch/v1", discovery.GVR{}, false},
		{"/version", discovery.GVR{}, false},
		{"", discovery.GVR{}, false},
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

// gvr is a discovery.GVR, short for the tables.
func gvr(group, version, resource string) discovery.GVR {
	return discovery.GVR{Group: group, Version: version, Resource: resource}
}
