package discovery_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/mvproxy/discovery"
)

// group is an API group with the given versions and no resources.
func group(name string, versions ...string) apidiscoveryv2.APIGroupDiscovery {
	g := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, v := range versions {
		g.Versions = append(g.Versions, apidiscoveryv2.APIVersionDiscovery{Version: v})
	}
	return g
}

// The server without batch/v1 lists its own groups as it serves them, then the group only
// its peer serves. The peer's flowcontrol v1beta3 is not listed: a peer never adds
// versions to a group the local server serves, nor reorders it.
func ExampleMerge() {
	local := discovery.NewList(group("apps", "v1"), group("flowcontrol.apiserver.k8s.io", "v1"))
	peer := discovery.NewList(group("apps", "v2", "v1"), group("batch", "v1"), group("flowcontrol.apiserver.k8s.io", "v1beta3", "v1"))
	merged := discovery.Merge(local, []discovery.ServerGroups{{ID: "apiserver-b", Groups: peer}})
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

// A MergedHandler in front of the local server's discovery: it merges the peer's group
// in, answers a client that already holds the merged document with 304, and merges
// again only when the peers change.
func ExampleMergedHandler() {
	localBody, localETag, _ := discovery.Encode(discovery.NewList(group("apps", "v1")))
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", localETag)
		if r.Header.Get("If-None-Match") == localETag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write(localBody)
	})
	peers := []discovery.ServerGroups{{ID: "apiserver-b", Groups: discovery.NewList(group("batch", "v1"))}}
	generation := uint64(1)
	h := &discovery.MergedHandler{
		Local:   local,
		Peers:   func() (uint64, []discovery.ServerGroups) { return generation, peers },
		Observe: func(hit bool) { fmt.Println("cache hit:", hit) },
	}
	get := func(ifNoneMatch string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/apis", nil)
		req.Header.Set("If-None-Match", ifNoneMatch)
		h.ServeHTTP(rec, req)
		return rec
	}

	first := get("")
	merged, _ := discovery.Parse(first.Body.Bytes())
	fmt.Println(first.Code, len(merged.Items), "groups")
	fmt.Println(get(first.Header().Get("ETag")).Code)
	generation, peers = 2, nil // the peer left
	fmt.Println(get(first.Header().Get("ETag")).Header().Get("ETag") == localETag)
	// Output:
	// cache hit: false
	// 200 2 groups
	// cache hit: true
	// 304
	// cache hit: false
	// true
}
