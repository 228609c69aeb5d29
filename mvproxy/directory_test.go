package mvproxy

import (
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
)

func TestDirectoryPeerLifecycle(t *testing.T) {
	t.Parallel()
	d := NewDirectory("self")
	jobs := gvr("batch", "v1", "jobs")
	if !d.SetPeer(PeerInfo{ID: "p", Address: "127.0.0.1:1", Holder: "h1"}) {
		t.Error("a new peer is not reported as new")
	}
	d.SetPeerDocument("p", "h1", discoverytest.Document("batch/v1/jobs"))
	gen, _ := d.PeerGroups()

	// A refresh that finds the same document changes nothing a merge reads.
	d.SetPeerDocument("p", "h1", discoverytest.Document("batch/v1/jobs"))
	if g, _ := d.PeerGroups(); g != gen {
		t.Error("an identical refresh invalidated the merge")
	}
	// A failed refresh keeps the peer capable, with its versions Stale in the merge.
	d.SetPeerStale("p", "h1")
	g, peers := d.PeerGroups()
	if g == gen || len(d.Capable(jobs)) != 1 {
		t.Errorf("stale peer: generation %d (was %d), capable %v", g, gen, d.Capable(jobs))
	}
	if f := peers[0].Groups.Items[0].Versions[0].Freshness; f != apidiscoveryv2.DiscoveryFreshnessStale {
		t.Errorf("stale peer's version freshness %q", f)
	}
	// A document fetched for an earlier holder is ignored; a restart forgets the old one.
	if d.SetPeer(PeerInfo{ID: "p", Address: "127.0.0.1:1", Holder: "h2"}) != true {
		t.Error("a restarted peer is not reported")
	}
	d.SetPeerDocument("p", "h1", discoverytest.Document("batch/v1/jobs"))
	if len(d.Capable(jobs)) != 0 {
		t.Error("a document of the previous holder was kept")
	}
	d.SetPeerDocument("p", "h2", discoverytest.Document("batch/v1/jobs"))
	if _, peers := d.PeerGroups(); peers[0].Groups.Items[0].Versions[0].Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent {
		t.Error("a successful fetch did not clear Stale")
	}
	d.RemovePeer("p")
	if len(d.Peers()) != 0 || len(d.Capable(jobs)) != 0 {
		t.Error("removed peer still known")
	}
}
