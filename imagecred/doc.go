// Package imagecred is the kubelet's image credential provider mechanism (KEP-2133, with the
// service-account tokens of KEP-4412) as a library: any node agent, image pre-puller,
// registry mirror or CI tool can run existing provider plugins (ECR, ACR, GCP, Cloudsmith)
// from an existing kubelet CredentialProviderConfig and get the credentials the kubelet
// would use.
//
// The pieces, in the order data flows:
//
//   - LoadConfig reads a CredentialProviderConfig file or directory (the kubelet's merge
//     rules and config hash); Config.Validate reports every error with its field path, in
//     the kubelet's words.
//   - MatchImage and NormalizeImage are the kubelet's matchImages globbing and image
//     normalisation.
//   - New builds a Keyring: one provider per config entry, each running its plugin through
//     internal/execplugin, decoding the response strictly, caching it (Image, Registry or
//     Global keys, cacheDuration) and collapsing concurrent identical requests into one exec.
//   - Keyring.Lookup asks every matching provider, in config order, and merges the answers
//     the way the kubelet's keyring does: most specific key first, with the docker.io
//     fallback.
//   - A provider with tokenAttributes gets a service-account token bound to the pod from a
//     ServiceAccounts source (NewServiceAccounts wraps a Kubernetes client).
//
// A Keyring is safe for concurrent use. Metrics go to the prometheus.Registerer passed in
// Options, under the kubelet's names.
package imagecred
