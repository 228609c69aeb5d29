// Package discoverytest builds discovery documents for the tests of the mixed version
// proxy's packages: a server's document from resource names, and large documents for
// benchmarks.
package discoverytest

import (
	"fmt"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/mvproxy/discovery"
)

// Document builds a server's discovery from "group/version/resource" names ("" group =
// core, in the /api document); "group/version/resource/subresource" adds a subresource to
// the resource listed before. Versions are Current; resources are namespaced, with the
// verbs get, list and watch.
func Document(gvrs ...string) *discovery.Document {
	groups, core := discovery.NewList(), discovery.NewList()
	for _, s := range gvrs {
		parts := strings.Split(s, "/")
		g, v, r := parts[0], parts[1], parts[2]
		l := groups
		if g == "" {
			l = core
		}
		if len(parts) == 4 {
			last := &l.Items[len(l.Items)-1].Versions[len(l.Items[len(l.Items)-1].Versions)-1]
			res := &last.Resources[len(last.Resources)-1]
			res.Subresources = append(res.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: parts[3], Verbs: []string{"get"}})
			continue
		}
		gi := -1
		for i := range l.Items {
			if l.Items[i].Name == g {
				gi = i
			}
		}
		if gi < 0 {
			l.Items = append(l.Items, apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g}})
			gi = len(l.Items) - 1
		}
		grp := &l.Items[gi]
		vi := -1
		for i := range grp.Versions {
			if grp.Versions[i].Version == v {
				vi = i
			}
		}
		if vi < 0 {
			grp.Versions = append(grp.Versions, apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent})
			vi = len(grp.Versions) - 1
		}
		grp.Versions[vi].Resources = append(grp.Versions[vi].Resources, apidiscoveryv2.APIResourceDiscovery{
			Resource: r, Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list", "watch"},
		})
	}
	return discovery.NewDocument(groups, core)
}

// Groups builds an /apis document of n groups of 2 versions with 5 resources each, the
// first shift groups named after server, so that the documents of servers differ.
func Groups(server, n, shift int) *apidiscoveryv2.APIGroupDiscoveryList {
	l := discovery.NewList()
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
