// Package sidecar runs the mixed version proxy of KEP-4020 beside a stock kube-apiserver
// (1.30 and later), which then needs no feature gate: clients talk to the sidecar, which
// serves what its apiserver serves through it and sends the rest to a peer sidecar whose
// apiserver serves it. It is what `kplug peerproxy` runs.
//
// The pieces fit as follows. New checks the Options and builds an mvproxy.Handler in
// front of a reverse proxy to the local apiserver, and Serve runs it: a TLS listener with
// kube-apiserver's server limits, where clients get the serving certificate and peers
// (who ask for the peer server name) the peer certificate, both read again when their
// files change (CertificateFiles); and three loops that keep the handler's
// mvproxy.Directory true. LocalDiscovery reads the local apiserver's own discovery
// periodically, and on demand when a request names a resource nobody is known to serve.
// LeaseKeeper advertises this sidecar's address in an identity Lease, and deletes the
// Leases of sidecars nobody renews. PeerWatcher follows the other sidecars' Leases and
// fetches each one's discovery, believing an address only if the server there proves
// itself with a certificate from the peer CA for the peer server name, never for the
// address a Lease names (anyone with Lease write access can write one). In front of all
// of it, a gate answers 503 until Serve has read which identity headers the local
// kube-apiserver reads from front proxies and found them to be those the sidecar sets
// and removes, and again whenever a later reading fails; the Lease waits for the first
// reading that succeeds. When Serve's context ends, it lets requests finish, deletes its
// Lease and returns.
//
// A k8s.io/apiserver-based server that installs the mvproxy filter itself can use
// LocalDiscovery, LeaseKeeper and PeerWatcher to fill its Directory the same way.
package sidecar
