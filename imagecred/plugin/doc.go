// Package plugin is the SDK for image credential provider plugins: a plugin is a Func, from
// a Request (an image, and with tokenAttributes a service-account token and annotations)
// to a Response (credentials, their cacheKeyType and cacheDuration).
//
// How the pieces fit:
//
//   - Main runs a Func as a plugin binary for the kubelet (or kplug): Run reads the
//     CredentialProviderRequest on stdin in whichever version it comes, calls the Func,
//     and writes the CredentialProviderResponse in the same version to stdout; Main turns
//     an error into a message on stderr and exit code 1.
//   - imagecred.FuncProvider runs the same Func in-process, as a Provider of a Keyring,
//     with no binary, no encoding and no process.
//   - TokenExchange is a ready Func: it trades the service-account token for a registry
//     token at an OAuth 2.0 Token Exchange (RFC 8693) endpoint.
//
// It imports no other kplug package, only the kubelet's API types and apimachinery, so that
// plugin binaries stay small.
package plugin
