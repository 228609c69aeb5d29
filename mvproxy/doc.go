// Package mvproxy implements the mixed version proxy of KEP-4020: it sends a resource
// request that the local kube-apiserver cannot serve to a peer that can, and serves the
// peer-aggregated discovery document, so that clients see one cluster during an upgrade.
//
// The pieces fit as follows. A Directory holds what each server serves: the local
// server's discovery, refreshed by RunLocal, and each peer's, kept by a PeerWatcher that
// follows the peers' identity Leases. Route is the pure routing decision. Handler wraps the
// local handler (the next filter in a k8s.io/apiserver chain, or a reverse proxy to a stock
// kube-apiserver) and forwards elsewhere what Route sends elsewhere. Sidecar wires all of
// it, with a Lease of its own and a TLS listener, beside a stock kube-apiserver.
package mvproxy
