// Package discovery holds the aggregated discovery documents of the mixed version proxy
// (KEP-4020): what each server serves, and the peer-aggregated /apis document every
// server answers with during an upgrade.
//
// The pieces fit in the order a document travels. Fetch reads a server's own /apis and
// /api documents (asking with AcceptNoPeer) and Parse checks them; NewDocument indexes
// what they list, so that routing can ask Document.Serves for a GVR. For a client's
// GET /apis, Negotiate reads the Accept header (within MaxAcceptBytes and MaxMediaRanges)
// and says whether it wants the merged document, the local one, or something the local
// server answers alone. Merge builds the merged document by one rule: peers add only the
// groups the local server lacks, after the local groups, and never change what the local
// server serves. Encode writes it with the ETag kube-apiserver would give it.
// MergedHandler puts these together as an http.Handler that asks the local server for
// its document as the caller, merges, and caches the result until the local document or
// a peer's changes.
//
// The package knows nothing of routing, peers' addresses or Leases: the mvproxy package
// decides where requests go, and mvproxy/sidecar finds peers and fetches their documents.
package discovery
