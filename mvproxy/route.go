package mvproxy

// Target is where Route sends a request.
type Target int

const (
	// Local serves the request with the local handler. This includes requests no server
	// serves, which the local server answers with 404.
	Local Target = iota
	// Peer forwards the request to a capable peer.
	Peer
	// NotReady answers 503 with Retry-After: without synced caches, a 404 could be wrong.
	NotReady
	// LocalUnavailable answers 503 with Retry-After: the local server was unreachable
	// and no peer serves the resource.
	LocalUnavailable
)

func (t Target) String() string {
	switch t {
	case Local:
		return "local"
	case Peer:
		return "peer"
	case NotReady:
		return "not-ready"
	case LocalUnavailable:
		return "local-unavailable"
	}
	return "unknown"
}

// RouteInput is everything the routing decision depends on.
type RouteInput struct {
	// IsResource is false for non-resource paths (health, metrics, discovery, /version).
	IsResource bool
	// Proxied is true when a trusted peer already proxied the request (one hop only).
	Proxied bool
	// LocalServes is true when the local server's discovery lists the resource.
	LocalServes bool
	// LocalStale is true when the local server was unreachable since its discovery was
	// read: it may have restarted as another version, so LocalServes may be wrong either
	// way, and a request sent to it could get a wrong 404.
	LocalStale bool
	// Synced is true once local discovery has been read and every peer known at start has
	// been asked for its discovery once.
	Synced bool
	// CapablePeers counts the peers whose discovery lists the resource.
	CapablePeers int
}

// Decision is a routing decision and the reason for it, for logs.
type Decision struct {
	Target Target
	Reason string
}

// Route decides where a request goes. It is a pure function.
func Route(in RouteInput) Decision {
	switch {
	case !in.IsResource:
		return Decision{Local, "not a resource request"}
	case in.Proxied:
		return Decision{Local, "already proxied by a peer"}
	case in.LocalStale && in.CapablePeers > 0:
		return Decision{Peer, "local discovery stale, served by a peer"}
	case in.LocalStale:
		return Decision{LocalUnavailable, "the local apiserver was unreachable since its discovery was read"}
	case in.LocalServes:
		return Decision{Local, "served locally"}
	case !in.Synced:
		return Decision{NotReady, "discovery caches not synced"}
	case in.CapablePeers > 0:
		return Decision{Peer, "served by a peer"}
	}
	return Decision{Local, "served by no server"}
}
