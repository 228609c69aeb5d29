package mvproxy_test

import (
	"fmt"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/mvproxy"
)

// A server without batch/v1 sends jobs to the peer that serves them, and answers 503
// rather than 404 while it does not know its peers yet.
func ExampleRoute() {
	jobs, _ := mvproxy.ResourceOf("/apis/batch/v1/namespaces/default/jobs")
	fmt.Println(jobs)
	fmt.Println(mvproxy.Route(mvproxy.RouteInput{IsResource: true, Synced: true, CapablePeers: 1}))
	fmt.Println(mvproxy.Route(mvproxy.RouteInput{IsResource: true, Synced: false}))
	fmt.Println(mvproxy.Route(mvproxy.RouteInput{IsResource: true, Synced: true}))
	// Output:
	// batch/v1/jobs
	// {peer served by a peer}
	// {not-ready discovery caches not synced}
	// {local served by no server}
}

// The server without batch/v1 lists its own groups as it serves them, then the group only
// its peer serves. The peer's flowcontrol v1beta3 is not listed: a peer never adds
// versions to a group the local server serves, nor reorders it.
func ExampleMerge() {
	group := func(name string, versions ...string) apidiscoveryv2.APIGroupDiscovery {
		g := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, v := range versions {
			g.Versions = append(g.Versions, apidiscoveryv2.APIVersionDiscovery{Version: v})
		}
		return g
	}
	local := &apidiscoveryv2.APIGroupDiscoveryList{Items: []apidiscoveryv2.APIGroupDiscovery{group("apps", "v1"), group("flowcontrol.apiserver.k8s.io", "v1")}}
	peer := &apidiscoveryv2.APIGroupDiscoveryList{Items: []apidiscoveryv2.APIGroupDiscovery{group("apps", "v2", "v1"), group("batch", "v1"), group("flowcontrol.apiserver.k8s.io", "v1beta3", "v1")}}
	merged := mvproxy.Merge(local, []mvproxy.ServerGroups{{ID: "apiserver-b", Groups: peer}})
	for _, g := range merged.Items {
		fmt.Print(g.Name)
		for _, v := range g.Versions {
			fmt.Print(" ", v.Version)
		}
		fmt.Println()
	}
	// Output:
	// apps v1
	// flowcontrol.apiserver.k8s.io v1
	// batch v1
}
