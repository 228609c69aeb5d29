package mvproxy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func groupNames(l *apidiscoveryv2.APIGroupDiscoveryList) []string {
	var out []string
	for _, g := range l.Items {
		out = append(out, g.Name)
	}
	return out
}

func TestMergeOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		lists [][]string
		want  []string
	}{
		{"identical", [][]string{{"b", "a"}, {"b", "a"}}, []string{"b", "a"}},
		{"a name only one server has keeps its place", [][]string{{"a", "c"}, {"a", "b", "c"}}, []string{"a", "b", "c"}},
		{"new names at the end", [][]string{{"a"}, {"a", "z", "y"}}, []string{"a", "z", "y"}},
		{"disagreement: first seen wins", [][]string{{"a", "b"}, {"b", "a"}}, []string{"a", "b"}},
		{"empty first list", [][]string{{}, {"x", "y"}}, []string{"x", "y"}},
		{"a disagreement leaves the rest ordered", [][]string{{"a", "b", "c"}, {"b", "a", "d", "c"}}, []string{"a", "b", "d", "c"}},
		{"three lists", [][]string{{"apps", "batch"}, {"apps", "policy", "batch"}, {"batch", "storage"}}, []string{"apps", "policy", "batch", "storage"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, mergeOrder(tt.lists)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestMergeResourcesOfPeerOnlyGroups(t *testing.T) {
	t.Parallel()
	local := doc("batch/v1/jobs").Groups
	a := doc("apps/v1/deployments", "batch/v1/jobs").Groups
	b := doc("apps/v1/deployments", "apps/v2/deployments", "batch/v1/cronjobs").Groups
	a.Items[0].Versions[0].Resources[0].Verbs = []string{"get", "list"}
	a.Items[0].Versions[0].Resources[0].Subresources = []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "status", Verbs: []string{"get"}}}
	b.Items[0].Versions[0].Resources[0].Verbs = []string{"get", "watch"}
	b.Items[0].Versions[0].Resources[0].Subresources = []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "scale", Verbs: []string{"get"}}, {Subresource: "status", Verbs: []string{"patch"}}}
	b.Items[0].Versions[0].Freshness = apidiscoveryv2.DiscoveryFreshnessStale
	a.Items[0].Versions[0].Freshness = apidiscoveryv2.DiscoveryFreshnessStale

	got := Merge(local, []ServerGroups{{ID: "b", Groups: b}, {ID: "a", Groups: a}})
	if diff := cmp.Diff([]string{"batch", "apps"}, groupNames(got)); diff != "" {
		t.Fatalf("groups (-want +got):\n%s", diff)
	}
	// batch is the local server's, as it lists it: no cronjobs from peer b.
	if diff := cmp.Diff(local.Items[0], got.Items[0]); diff != "" {
		t.Errorf("local batch group changed (-want +got):\n%s", diff)
	}
	apps := got.Items[1]
	if len(apps.Versions) != 2 || apps.Versions[0].Version != "v1" || apps.Versions[1].Version != "v2" {
		t.Fatalf("apps group %+v", apps)
	}
	dep := apps.Versions[0].Resources[0]
	if diff := cmp.Diff([]string{"get", "list", "watch"}, dep.Verbs); diff != "" {
		t.Errorf("verbs (-want +got):\n%s", diff)
	}
	wantSubs := []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "scale", Verbs: []string{"get"}}, {Subresource: "status", Verbs: []string{"get", "patch"}}}
	if diff := cmp.Diff(wantSubs, dep.Subresources); diff != "" {
		t.Errorf("subresources (-want +got):\n%s", diff)
	}
	if apps.Versions[0].Freshness != apidiscoveryv2.DiscoveryFreshnessStale {
		t.Errorf("freshness %q, want Stale when every peer has it Stale", apps.Versions[0].Freshness)
	}
	// The inputs are untouched.
	if diff := cmp.Diff([]string{"get", "list"}, a.Items[0].Versions[0].Resources[0].Verbs); diff != "" {
		t.Errorf("Merge changed its input: %s", diff)
	}
}

func TestMergeIsIndependentOfPeerOrder(t *testing.T) {
	t.Parallel()
	local := doc("apps/v1/deployments", "batch/v1/jobs").Groups
	peers := []ServerGroups{
		{ID: "s1", Groups: doc("apps/v1/deployments", "batch/v1/jobs", "x.io/v1/a").Groups},
		{ID: "s2", Groups: doc("batch/v1/jobs", "apps/v1/deployments", "y.io/v1/b").Groups},
		{ID: "s3", Groups: doc("z.io/v1/c", "apps/v1/statefulsets").Groups},
	}
	want, err := json.Marshal(Merge(local, peers))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		p := slices.Clone(peers)
		rand.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		got, _ := json.Marshal(Merge(local, p))
		if string(got) != string(want) {
			t.Fatalf("permutation %d gives another document:\n%s\n%s", i, got, want)
		}
	}
	if got := groupNames(Merge(local, peers)); !slices.Equal(got, []string{"apps", "batch", "x.io", "y.io", "z.io"}) {
		t.Errorf("group order %v", got)
	}
}

func TestMergeSingleAndEmpty(t *testing.T) {
	t.Parallel()
	if got := Merge(nil, nil); got.Kind != discoveryList || len(got.Items) != 0 {
		t.Errorf("Merge(nil, nil) = %+v", got)
	}
	one := doc("apps/v1/deployments").Groups
	if got := Merge(one, []ServerGroups{{ID: "b"}}); !cmp.Equal(got.Items, one.Items) {
		t.Errorf("local with a nil peer document: %+v", got.Items)
	}
	if got := Merge(nil, []ServerGroups{{ID: "b", Groups: one}}); !cmp.Equal(got.Items, one.Items) {
		t.Errorf("no local document, one peer: %+v", got.Items)
	}
}

func TestParseDiscoveryRejects(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, wantErr string }{
		{"not JSON", `<html>`, "decoding aggregated discovery: invalid character '<' looking for beginning of value"},
		{"legacy APIGroupList", `{"kind":"APIGroupList","apiVersion":"v1"}`, `decoding aggregated discovery: got kind "APIGroupList" apiVersion "v1", want APIGroupDiscoveryList apidiscovery.k8s.io/v2`},
		{"group twice", `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"a"}},{"metadata":{"name":"a"}}]}`, `aggregated discovery lists group "a" twice`},
		{"empty version", `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"a"},"versions":[{"version":""}]}]}`, `aggregated discovery: group "a" has an empty or repeated version ""`},
		{"resource twice", `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"a"},"versions":[{"version":"v1","resources":[{"resource":"r"},{"resource":"r"}]}]}]}`, `aggregated discovery: a/v1 has an empty or repeated resource "r"`},
	}
	for _, tt := range tests {
		_, err := ParseDiscovery([]byte(tt.in))
		if err == nil || err.Error() != tt.wantErr {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.wantErr)
		}
	}
}

// FuzzDiscovery parses arbitrary documents; whatever parses must merge, whatever the order
// of the peers, into a document that keeps the local groups exactly and serves every
// resource of every group only peers list.
func FuzzDiscovery(f *testing.F) {
	seed, _ := json.Marshal(doc("apps/v1/deployments", "batch/v1/jobs", "batch/v2/jobs").Groups)
	peer, _ := json.Marshal(doc("apps/v2/deployments", "apps/v1/deployments", "x.io/v1/a").Groups)
	f.Add(seed, []byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"batch"},"versions":[{"version":"v1","resources":[{"resource":"cronjobs","verbs":["get"]}]}]}]}`), peer)
	f.Add([]byte(`{}`), []byte(`null`), []byte(``))
	f.Fuzz(func(t *testing.T, l, a, b []byte) {
		local, errL := ParseDiscovery(l)
		la, errA := ParseDiscovery(a)
		lb, errB := ParseDiscovery(b)
		if errL != nil || errA != nil || errB != nil {
			return
		}
		m1 := Merge(local, []ServerGroups{{ID: "a", Groups: la}, {ID: "b", Groups: lb}})
		m2 := Merge(local, []ServerGroups{{ID: "b", Groups: lb}, {ID: "a", Groups: la}})
		j1, _ := json.Marshal(m1)
		j2, _ := json.Marshal(m2)
		if string(j1) != string(j2) {
			t.Fatalf("merge depends on the order of the peers")
		}
		if _, err := ParseDiscovery(j1); err != nil {
			t.Fatalf("merged document does not parse: %v", err)
		}
		if !cmp.Equal(local.Items, m1.Items[:len(local.Items)]) {
			t.Fatalf("merge changed the local groups")
		}
		localGroups := map[string]bool{}
		for _, g := range local.Items {
			localGroups[g.Name] = true
		}
		merged := NewDocument(m1, nil)
		for _, l := range []*apidiscoveryv2.APIGroupDiscoveryList{la, lb} {
			for g := range NewDocument(l, nil).served {
				if !localGroups[g.Group] && !merged.Serves(g) {
					t.Fatalf("merge lost %v", g)
				}
			}
		}
	})
}

// benchGroups builds n groups of 2 versions with 5 resources each, the first shift
// groups named differently per server.
func benchGroups(server, n, shift int) *apidiscoveryv2.APIGroupDiscoveryList {
	l := &apidiscoveryv2.APIGroupDiscoveryList{}
	l.Kind, l.APIVersion = discoveryList, discoveryGroup+"/"+discoveryVersion
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
		l.Items = append(l.Items, grp)
	}
	return l
}
