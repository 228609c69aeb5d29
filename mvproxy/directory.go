package mvproxy

import (
	"cmp"
	"reflect"
	"slices"
	"sync"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/kplug/kplug/mvproxy/discovery"
)

// PeerInfo is a peer as its Lease advertises it.
type PeerInfo struct {
	ID      string // the Lease name
	Address string // host:port where the peer serves
	Holder  string // changes whenever the peer restarts
}

// Directory records which server serves what: the local server's discovery and each
// peer's. It is safe for concurrent use; the zero value is not usable, use NewDirectory.
type Directory struct {
	self string

	mu              sync.RWMutex
	local           *discovery.Document
	localStale      bool   // the local server was unreachable since local was read
	localGeneration uint64 // changes whenever the local document changes
	peers           map[string]*peerEntry
	peersSynced     bool
	generation      uint64 // changes whenever anything a merge reads changes
}

type peerEntry struct {
	info  PeerInfo
	doc   *discovery.Document // nil until fetched, or after a restart whose discovery failed
	stale bool                // the last refresh of doc failed
}

// NewDirectory returns an empty directory for the server with identity self.
func NewDirectory(self string) *Directory {
	return &Directory{self: self, peers: map[string]*peerEntry{}}
}

// Self returns the local server's identity.
func (d *Directory) Self() string { return d.self }

// SetLocal records the local server's discovery, which is then no longer stale.
func (d *Directory) SetLocal(doc *discovery.Document) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !sameDocument(d.local, doc) {
		d.generation++
		d.localGeneration++
	}
	d.local = doc
	d.localStale = false
}

// MarkLocalStale records that the local server could not be reached: it may be
// restarting, perhaps as another version that serves something else, so its discovery
// is not to be trusted until the next SetLocal (see RouteInput.LocalStale).
func (d *Directory) MarkLocalStale() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.localStale = true
}

// LocalStale reports whether MarkLocalStale was called since the last SetLocal.
func (d *Directory) LocalStale() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.localStale
}

// LocalGeneration changes whenever SetLocal records a document that lists something
// else; peers learn of it through the sidecar's Lease and read its discovery again.
func (d *Directory) LocalGeneration() uint64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.localGeneration
}

// sameDocument reports whether two documents list the same; a periodic refresh that
// finds nothing new must not invalidate the merged document.
func sameDocument(a, b *discovery.Document) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(a.Groups, b.Groups) && reflect.DeepEqual(a.Core, b.Core)
}

// Local returns the local server's discovery, nil before the first SetLocal.
func (d *Directory) Local() *discovery.Document {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.local
}

// SetPeer records a peer's address and holder. When the holder changes (the peer
// restarted), the peer's discovery is forgotten until SetPeerDocument. It returns
// whether the peer is new or restarted.
func (d *Directory) SetPeer(info PeerInfo) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.peers[info.ID]
	if ok && e.info == info {
		return false
	}
	changed := !ok || e.info.Holder != info.Holder
	if !ok {
		e = &peerEntry{}
		d.peers[info.ID] = e
	}
	if changed {
		e.doc = nil
	}
	e.info = info
	d.generation++
	return changed
}

// SetPeerDocument records a peer's discovery, unless the peer has gone or restarted
// since holder was read.
func (d *Directory) SetPeerDocument(id, holder string, doc *discovery.Document) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.peers[id]
	if !ok || e.info.Holder != holder {
		return
	}
	if !sameDocument(e.doc, doc) || e.stale {
		d.generation++
	}
	e.doc, e.stale = doc, false
}

// SetPeerStale records that refreshing a peer's discovery failed: the peer keeps its
// last-known discovery, so that its resources are answered with 503 rather than 404,
// and its versions are marked Stale in the merged document.
func (d *Directory) SetPeerStale(id, holder string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.peers[id]
	if !ok || e.info.Holder != holder || e.stale || e.doc == nil {
		return
	}
	e.stale = true
	d.generation++
}

// RemovePeer forgets a peer.
func (d *Directory) RemovePeer(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.peers[id]; ok {
		delete(d.peers, id)
		d.generation++
	}
}

// Peers returns the known peers, sorted by ID.
func (d *Directory) Peers() []PeerInfo {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]PeerInfo, 0, len(d.peers))
	for _, e := range d.peers {
		out = append(out, e.info)
	}
	slices.SortFunc(out, func(a, b PeerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// MarkPeersSynced records that every peer known at start was asked for its discovery.
func (d *Directory) MarkPeersSynced() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.peersSynced = true
}

// Synced reports whether local discovery is known and peers were synced once.
func (d *Directory) Synced() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.local != nil && d.peersSynced
}

// Capable returns the peers whose discovery lists g, sorted by ID.
func (d *Directory) Capable(g discovery.GVR) []PeerInfo {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []PeerInfo
	for _, e := range d.peers {
		if e.doc.Serves(g) {
			out = append(out, e.info)
		}
	}
	slices.SortFunc(out, func(a, b PeerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// MetricLabels returns g when the local server or a peer lists it, and other/other/other
// otherwise: the labels of a metric about a request the client named freely, so that
// clients cannot add series (see Metrics.ProxyError).
func (d *Directory) MetricLabels(g discovery.GVR) discovery.GVR {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.local.Serves(g) {
		return g
	}
	for _, e := range d.peers {
		if e.doc.Serves(g) {
			return g
		}
	}
	return otherResource
}

// PeerGroups returns the /apis documents of the peers whose discovery is known, with the
// versions of a peer whose last refresh failed marked Stale, and a generation that
// changes whenever anything a merge reads changes (a peer's document, a peer joining,
// restarting or leaving, the local document): the key of discovery.MergedHandler's
// cache.
func (d *Directory) PeerGroups() (generation uint64, peers []discovery.ServerGroups) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for id, e := range d.peers {
		if e.doc == nil || e.doc.Groups == nil {
			continue
		}
		groups := e.doc.Groups
		if e.stale {
			groups = markStale(groups)
		}
		peers = append(peers, discovery.ServerGroups{ID: id, Groups: groups})
	}
	return d.generation, peers
}

// markStale returns a copy of l whose versions are all Stale; resources are shared.
func markStale(l *apidiscoveryv2.APIGroupDiscoveryList) *apidiscoveryv2.APIGroupDiscoveryList {
	out := *l
	out.Items = slices.Clone(l.Items)
	for i := range out.Items {
		out.Items[i].Versions = slices.Clone(out.Items[i].Versions)
		for j := range out.Items[i].Versions {
			out.Items[i].Versions[j].Freshness = apidiscoveryv2.DiscoveryFreshnessStale
		}
	}
	return &out
}
