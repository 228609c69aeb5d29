package discovery

import (
	"cmp"
	"container/heap"
	"slices"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

// ServerGroups is one server's /apis document, named by the server's identity.
type ServerGroups struct {
	ID     string
	Groups *apidiscoveryv2.APIGroupDiscoveryList
}

// Merge returns the peer-aggregated /apis document of a server whose own document is
// local. Peers only add what the local server lacks, and never change what it serves:
//
//   - every group local lists comes first, in local's order, with its versions exactly
//     as local lists them: a peer can neither add a version to it nor reorder its
//     versions (which would change the preferred version clients use);
//   - in each version local serves, local's resources come first, exactly as local lists
//     them; after them come the resources peers list in the same group and version that
//     local lacks (a resource new in that version, as MutatingAdmissionPolicy in
//     admissionregistration.k8s.io/v1 is new in 1.36), so that clients of an older
//     server find a newer server's resources during an upgrade;
//   - then the groups that only peers serve, so that the local server's groups keep
//     priority wherever clients resolve a resource name or short name by group order;
//   - among peers, peers are taken in order of ID; groups and versions keep every peer's
//     relative order where the peers agree, and where they disagree the name seen first
//     wins; a resource listed by several peers takes its fields from the first, with the
//     union of verbs (sorted) and of subresources (sorted by name); a version is Current
//     if any peer has it Current.
//
// When no peer adds anything, the result lists exactly local's groups. Merge does not
// modify its inputs; the result may share entries with them. It is safe to call
// concurrently.
func Merge(local *apidiscoveryv2.APIGroupDiscoveryList, peers []ServerGroups) *apidiscoveryv2.APIGroupDiscoveryList {
	out, _ := merge(local, peers)
	return out
}

// merge is Merge, and reports whether peers added anything to local.
func merge(local *apidiscoveryv2.APIGroupDiscoveryList, peers []ServerGroups) (*apidiscoveryv2.APIGroupDiscoveryList, bool) {
	out := &apidiscoveryv2.APIGroupDiscoveryList{}
	out.Kind, out.APIVersion = listKind, listGroup+"/"+listVersion
	localNames := map[string]bool{}
	if local != nil {
		out.Items = slices.Clone(local.Items)
		for _, g := range local.Items {
			localNames[g.Name] = true
		}
	}
	peers = slices.DeleteFunc(slices.Clone(peers), func(s ServerGroups) bool { return s.Groups == nil })
	slices.SortFunc(peers, func(a, b ServerGroups) int { return cmp.Compare(a.ID, b.ID) })

	byName := map[string][]*apidiscoveryv2.APIGroupDiscovery{}
	inLocal := map[string][]*apidiscoveryv2.APIGroupDiscovery{}
	var orders [][]string
	for _, s := range peers {
		var order []string
		for j := range s.Groups.Items {
			g := &s.Groups.Items[j]
			if localNames[g.Name] {
				inLocal[g.Name] = append(inLocal[g.Name], g)
				continue
			}
			order = append(order, g.Name)
			byName[g.Name] = append(byName[g.Name], g)
		}
		orders = append(orders, order)
	}
	added := false
	for i := range out.Items {
		if g, ok := addPeerResources(&out.Items[i], inLocal[out.Items[i].Name]); ok {
			out.Items[i], added = g, true
		}
	}
	if len(byName) == 0 {
		return out, added
	}
	for _, name := range mergeOrder(orders) {
		out.Items = append(out.Items, mergeGroup(byName[name]))
	}
	return out, true
}

// addPeerResources returns local with, in each of its versions, the resources peers
// list in that version and local does not, after local's own; ok is false when peers
// add nothing. Versions only peers serve are left out, and local's resources are never
// changed.
func addPeerResources(local *apidiscoveryv2.APIGroupDiscovery, peers []*apidiscoveryv2.APIGroupDiscovery) (apidiscoveryv2.APIGroupDiscovery, bool) {
	if len(peers) == 0 {
		return *local, false
	}
	out := *local
	out.Versions = slices.Clone(local.Versions)
	ok := false
	for i := range out.Versions {
		v := &out.Versions[i]
		var theirs []*apidiscoveryv2.APIVersionDiscovery
		for _, g := range peers {
			for j := range g.Versions {
				if g.Versions[j].Version == v.Version {
					theirs = append(theirs, &g.Versions[j])
				}
			}
		}
		if len(theirs) == 0 {
			continue
		}
		mine := map[string]bool{}
		for _, r := range v.Resources {
			mine[r.Resource] = true
		}
		var extra []apidiscoveryv2.APIResourceDiscovery
		for _, r := range mergeVersion(theirs).Resources {
			if !mine[r.Resource] {
				extra = append(extra, r)
			}
		}
		if len(extra) > 0 {
			v.Resources = append(slices.Clone(v.Resources), extra...)
			ok = true
		}
	}
	return out, ok
}

func mergeGroup(gs []*apidiscoveryv2.APIGroupDiscovery) apidiscoveryv2.APIGroupDiscovery {
	if len(gs) == 1 {
		return *gs[0]
	}
	merged := apidiscoveryv2.APIGroupDiscovery{TypeMeta: gs[0].TypeMeta, ObjectMeta: gs[0].ObjectMeta}
	byVersion := map[string][]*apidiscoveryv2.APIVersionDiscovery{}
	orders := make([][]string, len(gs))
	for i, g := range gs {
		orders[i] = make([]string, len(g.Versions))
		for j := range g.Versions {
			v := &g.Versions[j]
			orders[i][j] = v.Version
			byVersion[v.Version] = append(byVersion[v.Version], v)
		}
	}
	versions := mergeOrder(orders)
	merged.Versions = make([]apidiscoveryv2.APIVersionDiscovery, len(versions))
	for i, name := range versions {
		merged.Versions[i] = mergeVersion(byVersion[name])
	}
	return merged
}

func mergeVersion(vs []*apidiscoveryv2.APIVersionDiscovery) apidiscoveryv2.APIVersionDiscovery {
	if len(vs) == 1 {
		return *vs[0]
	}
	merged := apidiscoveryv2.APIVersionDiscovery{Version: vs[0].Version, Freshness: vs[0].Freshness}
	index := map[string]int{}
	for _, v := range vs {
		if v.Freshness == apidiscoveryv2.DiscoveryFreshnessCurrent {
			merged.Freshness = v.Freshness
		}
		for _, r := range v.Resources {
			i, seen := index[r.Resource]
			if !seen {
				index[r.Resource] = len(merged.Resources)
				merged.Resources = append(merged.Resources, r)
				continue
			}
			merged.Resources[i] = mergeResource(merged.Resources[i], r)
		}
	}
	return merged
}

// mergeResource keeps a's fields and adds b's verbs and subresources.
func mergeResource(a, b apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIResourceDiscovery {
	if slices.Equal(a.Verbs, b.Verbs) && sameSubresources(a.Subresources, b.Subresources) {
		return a
	}
	a.Verbs = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(a.Verbs), b.Verbs...))))
	subs := map[string]apidiscoveryv2.APISubresourceDiscovery{}
	for _, s := range a.Subresources {
		subs[s.Subresource] = s
	}
	for _, s := range b.Subresources {
		if prev, ok := subs[s.Subresource]; ok {
			prev.Verbs = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(prev.Verbs), s.Verbs...))))
			s = prev
		}
		subs[s.Subresource] = s
	}
	a.Subresources = make([]apidiscoveryv2.APISubresourceDiscovery, 0, len(subs))
	for _, s := range subs {
		a.Subresources = append(a.Subresources, s)
	}
	slices.SortFunc(a.Subresources, func(x, y apidiscoveryv2.APISubresourceDiscovery) int {
		return cmp.Compare(x.Subresource, y.Subresource)
	})
	return a
}

func sameSubresources(a, b []apidiscoveryv2.APISubresourceDiscovery) bool {
	return slices.EqualFunc(a, b, func(x, y apidiscoveryv2.APISubresourceDiscovery) bool {
		return x.Subresource == y.Subresource && slices.Equal(x.Verbs, y.Verbs)
	})
}

// mergeOrder merges name lists into one list holding each name once, keeping every
// list's relative order where the lists agree (a topological order of "a comes before b
// in some list"). Among names free to go next, the one first seen wins; where the lists
// disagree (a cycle), the first-seen name left goes next.
func mergeOrder(lists [][]string) []string {
	if allEqual(lists) {
		return slices.Clone(lists[0])
	}
	rank := map[string]int{}
	var names []string
	for _, l := range lists {
		for _, n := range l {
			if _, ok := rank[n]; !ok {
				rank[n] = len(names)
				names = append(names, n)
			}
		}
	}
	next := make([][]int, len(names))
	indegree := make([]int, len(names))
	for _, l := range lists {
		for i := 1; i < len(l); i++ {
			a, b := rank[l[i-1]], rank[l[i]]
			if a == b {
				continue
			}
			next[a] = append(next[a], b)
			indegree[b]++
		}
	}
	ready := &intHeap{}
	for r, d := range indegree {
		if d == 0 {
			*ready = append(*ready, r)
		}
	}
	heap.Init(ready)
	out := make([]string, 0, len(names))
	done := make([]bool, len(names))
	emit := func(r int) {
		done[r] = true
		out = append(out, names[r])
		for _, n := range next[r] {
			if indegree[n]--; indegree[n] == 0 {
				heap.Push(ready, n)
			}
		}
	}
	forced := 0 // names before this rank are all done
	for len(out) < len(names) {
		if ready.Len() > 0 {
			if r := heap.Pop(ready).(int); !done[r] {
				emit(r)
			}
			continue
		}
		// The lists disagree (a cycle): the first-seen name left goes next.
		for done[forced] {
			forced++
		}
		emit(forced)
	}
	return out
}

func allEqual(lists [][]string) bool {
	for _, l := range lists[1:] {
		if !slices.Equal(l, lists[0]) {
			return false
		}
	}
	return true
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
