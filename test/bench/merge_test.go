// Package bench compares kplug's mixed version proxy with the upstream code it replaces,
// and tests the filter with k8s.io/apiserver's request context. It is a module of its own
// so that k8s.io/apiserver stays out of kplug's go.mod.
package bench

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"

	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// groups builds n groups of 2 versions with 5 resources each; the first shift groups are
// named after the server, so that the servers' documents differ.
func groups(server, n, shift int) []apidiscoveryv2.APIGroupDiscovery {
	var out []apidiscoveryv2.APIGroupDiscovery
	for g := range n {
		name := fmt.Sprintf("group%03d.example.com", g)
		if g < shift {
			name = fmt.Sprintf("only-s%d-group%03d.example.com", server, g)
		}
		grp := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, v := range []string{"v1", "v1beta1"} {
			ver := apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
			for r := range 5 {
				ver.Resources = append(ver.Resources, apidiscoveryv2.APIResourceDiscovery{
					Resource: fmt.Sprintf("things%d", r), Scope: apidiscoveryv2.ScopeNamespace,
					SingularResource: fmt.Sprintf("thing%d", r), Verbs: []string{"get", "list", "watch"},
					ResponseKind: &metav1.GroupVersionKind{Group: name, Version: v, Kind: fmt.Sprintf("Thing%d", r)},
				})
			}
			grp.Versions = append(grp.Versions, ver)
		}
		out = append(out, grp)
	}
	return out
}

type peers map[string][]apidiscoveryv2.APIGroupDiscovery

func (p peers) GetPeerResources() map[string][]apidiscoveryv2.APIGroupDiscovery { return p }

// BenchmarkMergedDiscovery: 3 servers × 100 groups (5 of them differing per server), the
// merged document built anew (merge, JSON, ETag) and served from the cache, by kplug and
// by k8s.io/apiserver's peer-aggregated discovery handler.
func BenchmarkMergedDiscovery(b *testing.B) {
	local := groups(0, 100, 5)
	remote := peers{"b": groups(1, 100, 5), "c": groups(2, 100, 5)}
	kplugServers := []discovery.ServerGroups{{ID: "a", Groups: list(local)}, {ID: "b", Groups: list(remote["b"])}, {ID: "c", Groups: list(remote["c"])}}

	rm := aggregated.NewResourceManager("apis")
	rm.SetGroups(local)

	b.Run("build/upstream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			// merges, then computes the ETag from the JSON, as on a cache miss
			if _, etag := aggregated.TestFetchFromCache("a", rm, remote); etag == "" {
				b.Fatal("no etag")
			}
		}
	})
	b.Run("build/kplug", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := json.Marshal(discovery.Merge(kplugServers[0].Groups, kplugServers[1:]))
			if err != nil {
				b.Fatal(err)
			}
			_ = fmt.Sprintf("%X", sha512.Sum512(data)) // the ETag, as upstream computes it

		}
	})

	b.Run("cached/upstream", func(b *testing.B) {
		h := aggregated.NewPeerAggregatedDiscoveryHandler("a", rm, remote, "apis")
		serve(b, h)
	})
	b.Run("cached/kplug", func(b *testing.B) {
		dir := mvproxy.NewDirectory("a")
		dir.SetLocal(discovery.NewDocument(list(local), nil))
		dir.MarkPeersSynced()
		for id, g := range remote {
			dir.SetPeer(mvproxy.PeerInfo{ID: id, Address: "127.0.0.1:1", Holder: "h"})
			dir.SetPeerDocument(id, "h", discovery.NewDocument(list(g), nil))
		}
		h, err := mvproxy.NewHandler(mvproxy.HandlerOptions{
			Local: rm, Directory: dir, PeerTransport: http.DefaultTransport,
			Identify: func(*http.Request) (mvproxy.Caller, error) { return mvproxy.Caller{}, nil },
		})
		if err != nil {
			b.Fatal(err)
		}
		serve(b, h)
	})
}

func list(g []apidiscoveryv2.APIGroupDiscovery) *apidiscoveryv2.APIGroupDiscoveryList {
	l := &apidiscoveryv2.APIGroupDiscoveryList{Items: g}
	l.Kind, l.APIVersion = "APIGroupDiscoveryList", "apidiscovery.k8s.io/v2"
	return l
}

func serve(b *testing.B, h http.Handler) {
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/apis", nil)
		req.Header.Set("Accept", discovery.AcceptAggregated)
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Body.Len() == 0 {
			b.Fatalf("status %d", rec.Code)
		}
	}
}

// Issue 12 finding 17: the merged /apis document had another ETag than kube-apiserver
// gives the same document. k8s.io/apiserver's aggregated discovery handler is the oracle:
// without peers kplug answers with the local handler's ETag, and with a peer's group the
// ETag is the one k8s.io/apiserver computes for the merged items.
func TestSecurityMergedETagMatchesUpstream(t *testing.T) {
	local := groups(0, 3, 0)
	rm := aggregated.NewResourceManager("apis")
	rm.SetGroups(local)
	dir := mvproxy.NewDirectory("a")
	dir.SetLocal(discovery.NewDocument(list(local), nil))
	dir.MarkPeersSynced()
	h, err := mvproxy.NewHandler(mvproxy.HandlerOptions{
		Local: rm, Directory: dir, PeerTransport: http.DefaultTransport,
		Identify: func(*http.Request) (mvproxy.Caller, error) { return mvproxy.Caller{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	var lastBody []byte
	get := func(h http.Handler) (string, *apidiscoveryv2.APIGroupDiscoveryList) {
		t.Helper()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/apis", nil)
		req.Header.Set("Accept", discovery.AcceptAggregated)
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		lastBody = rec.Body.Bytes()
		l, err := discovery.Parse(lastBody)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Header().Get("ETag"), l
	}

	wantETag, _ := get(rm)
	wantBody := lastBody
	if gotETag, _ := get(h); gotETag != wantETag {
		t.Errorf("no peers: ETag %s, want kube-apiserver's %s", gotETag, wantETag)
	}
	// Without peers the answer is the apiserver's own document, byte for byte, so that
	// its ETag holds whatever way the apiserver (of whichever version) computed it.
	if !bytes.Equal(lastBody, wantBody) {
		t.Errorf("no peers: the body (%d bytes) is not the apiserver's (%d bytes):\nkplug    %q\nupstream %q",
			len(lastBody), len(wantBody), lastBody[max(0, len(lastBody)-40):], wantBody[max(0, len(wantBody)-40):])
	}

	// A peer adds a group (named to sort last, as upstream orders groups of equal
	// priority by name).
	dir.SetPeer(mvproxy.PeerInfo{ID: "b", Address: "127.0.0.1:1", Holder: "h"})
	dir.SetPeerDocument("b", "h", discovery.NewDocument(list(groups(1, 1, 1)), nil))
	gotETag, merged := get(h)
	if len(merged.Items) != len(local)+1 {
		t.Fatalf("merged %d groups, want %d", len(merged.Items), len(local)+1)
	}
	oracle := aggregated.NewResourceManager("apis")
	oracle.SetGroups(merged.Items)
	wantETag, same := get(oracle)
	if a, b := fmt.Sprint(merged.Items), fmt.Sprint(same.Items); a != b {
		t.Fatalf("the oracle changed the document:\nkplug    %s\nupstream %s", a, b)
	}
	if gotETag != wantETag {
		t.Errorf("merged: ETag %s, want kube-apiserver's %s for the same document", gotETag, wantETag)
	}
}
