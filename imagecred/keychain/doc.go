// Package keychain gives go-containerregistry the credentials the kubelet would use: an
// authn.Keychain that resolves a registry or repository through an imagecred.Keyring, so
// that a program pulling with go-containerregistry (remote.Image, crane, ko, cosign, a
// Tekton or Knative controller) runs the node's credential provider plugins from the
// node's CredentialProviderConfig, with the kubelet's matching, caching and merge, and with
// a pod's service-account token for providers that want one (KEP-4412).
//
// It is a package of its own so that imagecred does not depend on go-containerregistry.
//
// A Keychain composes as any other: put it before authn.DefaultKeychain in
// authn.NewMultiKeychain to prefer the providers and fall back to the user's docker
// config, or after it to prefer the config. A provider failure is not an error of Resolve
// (it would end a MultiKeychain's search, where the kubelet would go on): the kubelet pulls
// without that provider's credentials, and so does a Keychain; Options.OnError hears of it.
package keychain
