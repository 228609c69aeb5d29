// Package imagecred is the kubelet's image credential provider mechanism (KEP-2133, with the
// service-account tokens of KEP-4412) as a library: any node agent, image pre-puller,
// registry mirror or CI tool can run existing provider plugins (ECR, ACR, GCP, Cloudsmith)
// from an existing kubelet CredentialProviderConfig and get the credentials the kubelet
// would use.
//
// # How the pieces fit
//
// Data flows one way, from configuration to credentials:
//
//  1. Configuration. LoadConfig reads a CredentialProviderConfig file or directory with the
//     kubelet's merge rules and config hash; Config.Validate checks it once and reports
//     every error in the kubelet's words.
//  2. Source. A Provider answers one Request (a normalised image, see NormalizeImage, and
//     for a provider with tokenAttributes the pod's service account) with a Response.
//     Plugin runs the plugin binary through package execplugin (timeout, process group,
//     output cap, typed errors), sending the kubelet's exact request bytes and decoding the
//     answer strictly. FuncProvider answers with an in-process plugin.Func instead.
//  3. Decorators, each a Provider wrapping a Provider: WithCache is the kubelet's cache
//     (Image, Registry and Global keys, cacheDuration) and shares one run among concurrent
//     requests, detached from every caller; WithFailureCache remembers failures (opt-in);
//     WithServiceAccountToken requests the pod-bound token, inside the cache for cacheType
//     ServiceAccount and outside it for Token. Metrics observe the runs and the cache under
//     the kubelet's metric names.
//  4. Keyring. Lookup asks every provider whose matchImages match the image, in config
//     order, with the pod's service account and its configured annotations where the
//     provider has tokenAttributes, and merges the answers as the kubelet's keyring does:
//     most specific auth key first, with the Docker Hub fallback.
//  5. Output. Credentials in the order the kubelet tries them; DockerConfigJSON renders
//     them as a docker config.json, Keyring.DockerHelperGet answers the
//     docker-credential-helpers protocol (DockerHelperList and DockerHelperReadOnly the rest
//     of it, as read-only helpers answer), and package imagecred/keychain makes a Keyring a
//     go-containerregistry keychain.
//
// Before all of it, Pull.CredentialsNeeded says whether the kubelet would look credentials
// up at all for a pull (pull policy, image present, access to verify): a runtime that
// integrates imagecred asks it first, so that an image already on the node costs no plugin
// run (the kubelet 1.33 ran plugins regardless, kubernetes/kubernetes#132951).
//
// New does all of this from Options, checking the bin directory and binaries as the
// kubelet does at startup. Compose the pieces yourself (see the example) to put an
// in-process plugin, another Cache or a provider of your own in a chain.
//
// Everything here is safe for concurrent use.
package imagecred
