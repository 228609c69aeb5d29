package imagecred

import (
	"context"
	"errors"
	"fmt"

	kubeletv1 "k8s.io/kubelet/config/v1"
)

// KeyringEntry is one provider of a Keyring: its configuration and what answers for it.
type KeyringEntry struct {
	// Config is the provider's configuration. Name labels its credentials and errors,
	// MatchImages selects the images it is asked about, and TokenAttributes says what the
	// service-account side of its requests holds; the rest is its Provider's business.
	Config kubeletv1.CredentialProvider
	// Provider answers, usually a decorated Plugin (see New).
	Provider Provider
	// Path is the plugin binary, named in errors; empty for an in-process provider.
	Path string
	// ServiceAccounts reads the pod's service account for a provider with
	// tokenAttributes; nil makes such a provider fail for a pod with a service account
	// (and skip it without one, unless one is required).
	ServiceAccounts ServiceAccounts
}

// Keyring answers which credentials to use for an image, asking its providers as the
// kubelet asks its plugins. Create one with New or NewKeyring. It is safe for concurrent
// use.
type Keyring struct {
	entries   []keyringEntry
	locations *locationCache
}

type keyringEntry struct {
	KeyringEntry
	patterns []location // Config.MatchImages that parse; the others never match
}

// NewKeyring returns a Keyring that asks entries in order. Their configurations should be
// valid (see Config.Validate): a matchImages entry that does not parse never matches.
func NewKeyring(entries ...KeyringEntry) *Keyring {
	k := &Keyring{locations: &locationCache{}}
	for _, e := range entries {
		ke := keyringEntry{KeyringEntry: e}
		for _, m := range e.Config.MatchImages {
			if l, err := parseLocation(m); err == nil {
				ke.patterns = append(ke.patterns, l)
			}
		}
		k.entries = append(k.entries, ke)
	}
	return k
}

// Lookup normalises image as the kubelet does (see NormalizeImage) and returns the
// credentials for it; see LookupRepository.
func (k *Keyring) Lookup(ctx context.Context, image string, pod *Pod) ([]Credential, error) {
	repo, err := NormalizeImage(image)
	if err != nil {
		return nil, err
	}
	return k.LookupRepository(ctx, repo, pod)
}

// LookupRepository asks every provider whose matchImages match repo, in config order,
// and returns the credentials in the order the kubelet tries them: the most specific auth
// key first, providers in config order within a key, and the index.docker.io credentials
// for a Docker Hub image that nothing else matches. repo is a normalised repository (see
// NormalizeImage) or a bare registry host ("registry.io:5000"), as a docker credential
// helper is asked about; a host gets the index.docker.io credentials only if it is
// docker.io, index.docker.io or has neither '.' nor ':', as the kubelet decides for the
// images of that host. pod may be nil.
//
// A provider that fails contributes nothing, as in the kubelet; its error, a
// *ProviderError, is returned joined with the others', next to whatever the other
// providers returned.
func (k *Keyring) LookupRepository(ctx context.Context, repo string, pod *Pod) ([]Credential, error) {
	parsed, err := k.locations.parse(repo)
	if err != nil {
		return nil, fmt.Errorf("imagecred: invalid repository %q: %w", repo, err)
	}
	var (
		kr   = keyring{locations: k.locations}
		errs []error
	)
	for _, e := range k.entries {
		if !e.matches(parsed) {
			continue
		}
		req, resp, err := e.provide(ctx, repo, pod)
		if err != nil {
			errs = append(errs, &ProviderError{Provider: e.Config.Name, Path: e.Path, Image: repo, Err: err})
			continue
		}
		kr.add(e.Config.Name, req.ServiceAccount.coordinates(), resp.Auth)
	}
	return kr.lookup(repo), errors.Join(errs...)
}

func (e *keyringEntry) matches(image location) bool {
	for _, m := range e.patterns {
		if ok, _ := m.match(image); ok {
			return true
		}
	}
	return false
}

func (e *keyringEntry) provide(ctx context.Context, image string, pod *Pod) (*Request, *Response, error) {
	req, err := e.request(ctx, image, pod)
	if err != nil {
		return nil, nil, err
	}
	resp, err := e.Provider.Provide(ctx, req)
	return req, resp, err
}

// request builds the provider's request for image: for a provider with tokenAttributes,
// with the pod's service account and the configured annotations it has. Where the kubelet
// would not run the plugin (no service account although one is required, a required
// annotation missing), it returns the reason, and no token is requested.
func (e *keyringEntry) request(ctx context.Context, image string, pod *Pod) (*Request, error) {
	req := &Request{Image: image}
	ta := e.Config.TokenAttributes
	if ta == nil || ta.ServiceAccountTokenAudience == "" {
		return req, nil
	}
	if pod == nil || pod.ServiceAccountName == "" {
		if ta.RequireServiceAccount != nil && *ta.RequireServiceAccount {
			return nil, ErrNoServiceAccount
		}
		return req, nil
	}
	if e.ServiceAccounts == nil {
		return nil, errServiceAccountsMissing
	}
	acct, err := e.ServiceAccounts.ServiceAccount(ctx, pod.Namespace, pod.ServiceAccountName)
	if err != nil {
		return nil, err
	}
	annotations := map[string]string{}
	for _, k := range ta.RequiredServiceAccountAnnotationKeys {
		v, ok := acct.Annotations[k]
		if !ok {
			return nil, fmt.Errorf("%w: service account %s/%s has no annotation %q", ErrRequiredAnnotation, pod.Namespace, pod.ServiceAccountName, k)
		}
		annotations[k] = v
	}
	for _, k := range ta.OptionalServiceAccountAnnotationKeys {
		if v, ok := acct.Annotations[k]; ok {
			annotations[k] = v
		}
	}
	req.ServiceAccount = &ServiceAccountRequest{
		Namespace: pod.Namespace, Name: pod.ServiceAccountName, UID: acct.UID, Annotations: annotations,
		PodName: pod.Name, PodUID: pod.UID,
	}
	return req, nil
}

// coordinates are what a credential obtained with sa's token reports; nil without one.
func (sa *ServiceAccountRequest) coordinates() *ServiceAccountCoordinates {
	if sa == nil {
		return nil
	}
	return &ServiceAccountCoordinates{UID: string(sa.UID), Namespace: sa.Namespace, Name: sa.Name}
}
