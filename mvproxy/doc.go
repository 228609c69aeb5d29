// Package mvproxy is the mixed version proxy of KEP-4020 as an http.Handler filter: it
// sends a resource request that the local server cannot serve to a peer that can, and
// serves the peer-aggregated discovery document, so that clients see one cluster while
// its kube-apiservers run different versions.
//
// The pieces fit as follows. A Directory records who serves what: the local server's
// discovery document and each peer's (address, restart holder, document). Route is the
// routing decision, a pure function of what the Directory says about the requested
// resource (ResourceOf reads it from the path). Identify, a CertIdentifier or a function
// reading a k8s.io/apiserver request context, says who sent the request, as a Caller: a
// user forwarded as front-proxy headers, and whether a trusted peer sent it, so that only
// a peer's one-hop guard is honoured. Handler puts them together: it wraps the local
// handler (the next filter of a k8s.io/apiserver chain, or a reverse proxy to a stock
// kube-apiserver), forwards what Route sends to a peer with the caller's identity
// (ForwardIdentity), failing over between capable peers, and answers GET /apis with the
// merged document of package mvproxy/discovery. Metrics records all of it under
// kube-apiserver's metric names.
//
// The package keeps no peer up to date by itself. The Directory is filled by whoever
// knows the peers: package mvproxy/sidecar follows the sidecars' identity Leases, fetches
// each peer's discovery and refreshes the local one, and runs the whole proxy beside a
// stock kube-apiserver.
package mvproxy
