package discovery_test

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/mvproxy/discovery"
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
			if diff := cmp.Diff(tt.want, discovery.MergeOrder(tt.lists)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestMergeResourcesOfPeerOnlyGroups(t *testing.T) {
	t.Parallel()
	local := discoverytest.Document("batch/v1/jobs").Groups
	a := discoverytest.Document("apps/v1/deployments", "batch/v1/jobs").Groups
	b := discoverytest.Document("apps/v1/deployments", "apps/v2/deployments", "batch/v1/cronjobs").Groups
	a.Items[0].Versions[0].Resources[0].Verbs = []string{"get", "list"}
	a.Items[0].Versions[0].Resources[0].Subresources = []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "status", Verbs: []string{"get"}}}
	b.Items[0].Versions[0].Resources[0].Verbs = []string{"get", "watch"}
	b.Items[0].Versions[0].Resources[0].Subresources = []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "scale", Verbs: []string{"get"}}, {Subresource: "status", Verbs: []string{"patch"}}}
	b.Items[0].Versions[0].Freshness = apidiscoveryv2.DiscoveryFreshnessStale
	a.Items[0].Versions[0].Freshness = apidiscoveryv2.DiscoveryFreshnessStale

	got := discovery.Merge(local, []discovery.ServerGroups{{ID: "b", Groups: b}, {ID: "a", Groups: a}})
	if diff := cmp.Diff([]string{"batch", "apps"}, groupNames(got)); diff != "" {
		t.Fatalf("groups (-want +got):\n%s", diff)
	}
	// batch is the local server's, as it lists it, with peer b's cronjobs, which it
	// lacks, after its own jobs.
	want := local.Items[0]
	want.Versions = []apidiscoveryv2.APIVersionDiscovery{local.Items[0].Versions[0]}
	want.Versions[0].Resources = append(slices.Clone(want.Versions[0].Resources), b.Items[1].Versions[0].Resources[0])
	if diff := cmp.Diff(want, got.Items[0]); diff != "" {
		t.Errorf("local batch group (-want +got):\n%s", diff)
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
	local := discoverytest.Document("apps/v1/deployments", "batch/v1/jobs").Groups
	peers := []discovery.ServerGroups{
		{ID: "s1", Groups: discoverytest.Document("apps/v1/deployments", "batch/v1/jobs", "x.io/v1/a").Groups},
		{ID: "s2", Groups: discoverytest.Document("batch/v1/jobs", "apps/v1/deployments", "y.io/v1/b").Groups},
		{ID: "s3", Groups: discoverytest.Document("z.io/v1/c", "apps/v1/statefulsets").Groups},
	}
	want, err := json.Marshal(discovery.Merge(local, peers))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		p := slices.Clone(peers)
		rand.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		got, _ := json.Marshal(discovery.Merge(local, p))
		if string(got) != string(want) {
			t.Fatalf("permutation %d gives another document:\n%s\n%s", i, got, want)
		}
	}
	if got := groupNames(discovery.Merge(local, peers)); !slices.Equal(got, []string{"apps", "batch", "x.io", "y.io", "z.io"}) {
		t.Errorf("group order %v", got)
	}
}

func TestMergeSingleAndEmpty(t *testing.T) {
	t.Parallel()
	if got := discovery.Merge(nil, nil); got.Kind != "APIGroupDiscoveryList" || len(got.Items) != 0 {
		t.Errorf("Merge(nil, nil) = %+v", got)
	}
	one := discoverytest.Document("apps/v1/deployments").Groups
	if got := discovery.Merge(one, []discovery.ServerGroups{{ID: "b"}}); !cmp.Equal(got.Items, one.Items) {
		t.Errorf("local with a nil peer document: %+v", got.Items)
	}
	if got := discovery.Merge(nil, []discovery.ServerGroups{{ID: "b", Groups: one}}); !cmp.Equal(got.Items, one.Items) {
		t.Errorf("no local document, one peer: %+v", got.Items)
	}
}

// Documents shaped as kube-apiserver 1.36 and 1.38 write them (issue 28): both are v2
// (1.38 removed v2beta1, which 1.35 had stopped serving); they differ in what they serve.
// Here 1.38 has dropped resource.k8s.io/v1beta2, serves scheduling.k8s.io/v1alpha2 instead
// of v1alpha1, and adds a group. Whichever server is local, its groups and versions stay as
// it lists them, and the peer adds only groups and resources the local server lacks.
const (
	doc136 = `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[
{"metadata":{"name":"apps","creationTimestamp":null},"versions":[{"version":"v1","resources":[{"resource":"deployments","responseKind":{"group":"apps","version":"v1","kind":"Deployment"},"scope":"Namespaced","singularResource":"deployment","verbs":["create","delete","get","list","patch","update","watch"],"shortNames":["deploy"],"categories":["all"],"subresources":[{"subresource":"scale","responseKind":{"group":"autoscaling","version":"v1","kind":"Scale"},"verbs":["get","patch","update"]}]}],"freshness":"Current"}]},
{"metadata":{"name":"resource.k8s.io","creationTimestamp":null},"versions":[{"version":"v1","resources":[{"resource":"resourceclaims","responseKind":{"group":"resource.k8s.io","version":"v1","kind":"ResourceClaim"},"scope":"Namespaced","singularResource":"resourceclaim","verbs":["get","list","watch"]}],"freshness":"Current"},{"version":"v1beta2","resources":[{"resource":"resourceclaims","responseKind":{"group":"resource.k8s.io","version":"v1beta2","kind":"ResourceClaim"},"scope":"Namespaced","singularResource":"resourceclaim","verbs":["get","list","watch"]}],"freshness":"Current"}]},
{"metadata":{"name":"scheduling.k8s.io","creationTimestamp":null},"versions":[{"version":"v1","resources":[{"resource":"priorityclasses","responseKind":{"group":"scheduling.k8s.io","version":"v1","kind":"PriorityClass"},"scope":"Cluster","singularResource":"priorityclass","verbs":["get","list","watch"],"shortNames":["pc"]}],"freshness":"Current"},{"version":"v1alpha1","resources":[{"resource":"workloads","responseKind":{"group":"scheduling.k8s.io","version":"v1alpha1","kind":"Workload"},"scope":"Namespaced","singularResource":"workload","verbs":["get","list","watch"]}],"freshness":"Current"}]}]}`
	doc138 = `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[
{"metadata":{"name":"apps","creationTimestamp":null},"versions":[{"version":"v1","resources":[{"resource":"deployments","responseKind":{"group":"apps","version":"v1","kind":"Deployment"},"scope":"Namespaced","singularResource":"deployment","verbs":["create","delete","get","list","patch","update","watch"],"shortNames":["deploy"],"categories":["all"],"subresources":[{"subresource":"scale","responseKind":{"group":"autoscaling","version":"v1","kind":"Scale"},"verbs":["get","patch","update"]}]}],"freshness":"Current"}]},
{"metadata":{"name":"resource.k8s.io","creationTimestamp":null},"versions":[{"version":"v1","resources":[{"resource":"resourceclaims","responseKind":{"group":"resource.k8s.io","version":"v1","kind":"ResourceClaim"},"scope":"Namespaced","singularResource":"resourceclaim","verbs":["get","list","watch"]},{"resource":"devicetaintrules","responseKind":{"group":"resource.k8s.io","version":"v1","kind":"DeviceTaintRule"},"scope":"Cluster","singularResource":"devicetaintrule","verbs":["get","list","watch"]}],"freshness":"Current"}]},
{"metadata":{"name":"scheduling.k8s.io","creationTimestamp":null},"versions":[{"version":"v1","resources":[{"resource":"priorityclasses","responseKind":{"group":"scheduling.k8s.io","version":"v1","kind":"PriorityClass"},"scope":"Cluster","singularResource":"priorityclass","verbs":["get","list","watch"],"shortNames":["pc"]}],"freshness":"Current"},{"version":"v1alpha2","resources":[{"resource":"workloads","responseKind":{"group":"scheduling.k8s.io","version":"v1alpha2","kind":"Workload"},"scope":"Namespaced","singularResource":"workload","verbs":["get","list","watch"]}],"freshness":"Current"}]},
{"metadata":{"name":"example.k8s.io","creationTimestamp":null},"versions":[{"version":"v1alpha1","resources":[{"resource":"widgets","responseKind":{"group":"example.k8s.io","version":"v1alpha1","kind":"Widget"},"scope":"Namespaced","singularResource":"widget","verbs":["get","list","watch"]}],"freshness":"Current"}]}]}`
)

func TestMergeAcross136And138(t *testing.T) {
	t.Parallel()
	parse := func(doc string) *apidiscoveryv2.APIGroupDiscoveryList {
		l, err := discovery.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// what each merge lists, group by group: "group/version: resources"
	summary := func(l *apidiscoveryv2.APIGroupDiscoveryList) []string {
		var out []string
		for _, g := range l.Items {
			for _, v := range g.Versions {
				var rs []string
				for _, r := range v.Resources {
					rs = append(rs, r.Resource)
				}
				out = append(out, g.Name+"/"+v.Version+": "+strings.Join(rs, " "))
			}
		}
		return out
	}
	tests := []struct {
		name        string
		local, peer string
		want        []string
	}{
		{"1.36 local, 1.38 peer", doc136, doc138, []string{
			"apps/v1: deployments",
			"resource.k8s.io/v1: resourceclaims devicetaintrules",
			"resource.k8s.io/v1beta2: resourceclaims",
			"scheduling.k8s.io/v1: priorityclasses",
			"scheduling.k8s.io/v1alpha1: workloads",
			"example.k8s.io/v1alpha1: widgets",
		}},
		{"1.38 local, 1.36 peer", doc138, doc136, []string{
			"apps/v1: deployments",
			"resource.k8s.io/v1: resourceclaims devicetaintrules",
			"scheduling.k8s.io/v1: priorityclasses",
			"scheduling.k8s.io/v1alpha2: workloads",
			"example.k8s.io/v1alpha1: widgets",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			local := parse(tt.local)
			merged := discovery.Merge(local, []discovery.ServerGroups{{ID: "peer", Groups: parse(tt.peer)}})
			if diff := cmp.Diff(tt.want, summary(merged)); diff != "" {
				t.Errorf("merged (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(local.Items, merged.Items[:len(local.Items)], cmpopts.IgnoreFields(apidiscoveryv2.APIVersionDiscovery{}, "Resources")); diff != "" {
				t.Errorf("local groups and versions changed (-local +merged):\n%s", diff)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, wantErr string }{
		{"not JSON", `<html>`, "decoding aggregated discovery: invalid character '<' looking for beginning of value"},
		{"legacy APIGroupList", `{"kind":"APIGroupList","apiVersion":"v1"}`, `decoding aggregated discovery: got kind "APIGroupList" apiVersion "v1", want APIGroupDiscoveryList apidiscovery.k8s.io/v2`},
		{"v2beta1, which 1.38 removed", `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2beta1"}`, `decoding aggregated discovery: got kind "APIGroupDiscoveryList" apiVersion "apidiscovery.k8s.io/v2beta1", want APIGroupDiscoveryList apidiscovery.k8s.io/v2`},
		{"group twice", `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"a"}},{"metadata":{"name":"a"}}]}`, `aggregated discovery lists group "a" twice`},
		{"empty version", `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"a"},"versions":[{"version":""}]}]}`, `aggregated discovery: group "a" has an empty or repeated version ""`},
		{"resource twice", `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"a"},"versions":[{"version":"v1","resources":[{"resource":"r"},{"resource":"r"}]}]}]}`, `aggregated discovery: a/v1 has an empty or repeated resource "r"`},
	}
	for _, tt := range tests {
		_, err := discovery.Parse([]byte(tt.in))
		if err == nil || err.Error() != tt.wantErr {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.wantErr)
		}
	}
}

// FuzzDiscovery parses arbitrary documents; whatever parses must merge, whatever the order
// of the peers, into a document that keeps the local groups first with their versions in
// order, each local version's resources first and unchanged, and serves every resource
// peers list except in versions of local groups that the local server does not serve.
func FuzzDiscovery(f *testing.F) {
	seed, _ := json.Marshal(discoverytest.Document("apps/v1/deployments", "batch/v1/jobs", "batch/v2/jobs").Groups)
	peer, _ := json.Marshal(discoverytest.Document("apps/v2/deployments", "apps/v1/deployments", "x.io/v1/a").Groups)
	f.Add(seed, []byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"batch"},"versions":[{"version":"v1","resources":[{"resource":"cronjobs","verbs":["get"]}]}]}]}`), peer)
	f.Add([]byte(`{}`), []byte(`null`), []byte(``))
	f.Add(seed, []byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"apps"},"versions":[{"version":"v1","resources":[{"resource":"deployments","verbs":["get"],"subresources":[{"subresource":"scale","verbs":["get"]}]}]}]}]}`), peer)
	f.Fuzz(func(t *testing.T, l, a, b []byte) {
		local, errL := discovery.Parse(l)
		la, errA := discovery.Parse(a)
		lb, errB := discovery.Parse(b)
		if errL != nil || errA != nil || errB != nil {
			return
		}
		m1 := discovery.Merge(local, []discovery.ServerGroups{{ID: "a", Groups: la}, {ID: "b", Groups: lb}})
		m2 := discovery.Merge(local, []discovery.ServerGroups{{ID: "b", Groups: lb}, {ID: "a", Groups: la}})
		j1, _ := json.Marshal(m1)
		j2, _ := json.Marshal(m2)
		if string(j1) != string(j2) {
			t.Fatalf("merge depends on the order of the peers")
		}
		if _, err := discovery.Parse(j1); err != nil {
			t.Fatalf("merged document does not parse: %v", err)
		}
		localVersions := map[string]bool{} // group/version
		localGroups := map[string]bool{}
		for i, g := range local.Items {
			got := m1.Items[i]
			if got.Name != g.Name || len(got.Versions) != len(g.Versions) {
				t.Fatalf("merge changed local group %s: %+v", g.Name, got)
			}
			for j, v := range g.Versions {
				w := got.Versions[j]
				if w.Version != v.Version || w.Freshness != v.Freshness || len(w.Resources) < len(v.Resources) ||
					!cmp.Equal(v.Resources, w.Resources[:len(v.Resources)]) {
					t.Fatalf("merge changed local version %s/%s: %+v", g.Name, v.Version, w)
				}
				localVersions[g.Name+"/"+v.Version] = true
			}
			localGroups[g.Name] = true
		}
		merged, localDoc := discovery.NewDocument(m1, nil), discovery.NewDocument(local, nil)
		for _, l := range []*apidiscoveryv2.APIGroupDiscoveryList{la, lb} {
			for g := range discovery.Served(discovery.NewDocument(l, nil)) {
				// A subresource of a resource the local server lists is left out with the
				// rest of what peers say of that resource (requests for it are routed to
				// a peer that lists it all the same).
				parent, _, isSub := strings.Cut(g.Resource, "/")
				if isSub && localDoc.Serves(discovery.GVR{Group: g.Group, Version: g.Version, Resource: parent}) {
					continue
				}
				if (!localGroups[g.Group] || localVersions[g.Group+"/"+g.Version]) && !merged.Serves(g) {
					t.Fatalf("merge lost %v", g)
				}
			}
		}
	})
}
