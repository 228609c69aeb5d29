package keychain

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kplug/kplug/imagecred"
)

// Options configures New.
type Options struct {
	// Pod is the pod the images are pulled for: providers with tokenAttributes get its
	// service account, annotations and a token bound to it. Nil asks as a node agent
	// without a pod does: providers that require a service account fail, optional ones
	// run without a token.
	Pod *imagecred.Pod
	// OnError, if set, is called with the providers' failures of each lookup (joined
	// *imagecred.ProviderError values), whether or not other providers answered. Nil
	// drops them, as the kubelet drops them after logging. It may be called concurrently.
	OnError func(error)
}

// Keychain is an authn.Keychain (and authn.ContextKeychain) backed by an
// imagecred.Keyring. Create one with New (the zero value has no Keyring and is not
// usable); it is safe for concurrent use, and cheap, so a caller pulling for many pods makes
// one per pod over one shared Keyring (whose cache then serves them all).
type Keychain struct {
	keyring *imagecred.Keyring
	opts    Options
}

var (
	_ authn.Keychain        = (*Keychain)(nil)
	_ authn.ContextKeychain = (*Keychain)(nil)
)

// New returns a Keychain that asks keyring (which must not be nil), for o.Pod if set.
func New(keyring *imagecred.Keyring, o Options) *Keychain {
	return &Keychain{keyring: keyring, opts: o}
}

// Resolve is ResolveContext without a deadline.
func (k *Keychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	return k.ResolveContext(context.Background(), target)
}

// ResolveContext looks target up as the kubelet looks up an image of that repository (a
// registry alone as a docker credential helper is asked about it) and returns the first
// credential the kubelet would try, as k8schain does; authn.Anonymous when providers
// returned none, so that a MultiKeychain goes on to its next keychain. ctx bounds the
// lookup, including a plugin run the caller waits for (the run itself is shared by
// concurrent callers and bounded by the Keyring's timeout). The only error is a target
// that is not a valid repository.
func (k *Keychain) ResolveContext(ctx context.Context, target authn.Resource) (authn.Authenticator, error) {
	repo, err := repository(target)
	if err != nil {
		return nil, err
	}
	creds, err := k.keyring.LookupRepository(ctx, repo, k.opts.Pod)
	if err != nil && k.opts.OnError != nil {
		k.opts.OnError(err)
	}
	if len(creds) == 0 {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(authn.AuthConfig{Username: creds[0].Username, Password: creds[0].Password}), nil
}

// repository is what providers match for target: a repository normalised as the kubelet
// normalises images (index.docker.io/library/nginx is docker.io/library/nginx), or a
// registry host, with Docker Hub's hosts named docker.io as matchImages name it.
func repository(target authn.Resource) (string, error) {
	if r, ok := target.(name.Repository); ok {
		// go-containerregistry has normalised it already (library/ for official images),
		// naming Docker Hub index.docker.io where the kubelet says docker.io; parsing it
		// again as the kubelet parses an image would cost more than the cache hit.
		if r.RegistryStr() == name.DefaultRegistry {
			return "docker.io/" + r.RepositoryStr(), nil
		}
		return r.Name(), nil
	}
	s := target.String()
	if s != target.RegistryStr() {
		repo, err := imagecred.NormalizeImage(s)
		if err != nil {
			return "", fmt.Errorf("keychain: %w", err)
		}
		return repo, nil
	}
	switch strings.ToLower(s) {
	case "index.docker.io", "registry-1.docker.io":
		return "docker.io", nil
	}
	return s, nil
}
