package imagecred

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kplug/kplug/imagecred/plugin"
)

// Provider answers what a provider plugin is asked: the credentials for one image. The
// plugin run by Plugin is one, an in-process plugin.Func (FuncProvider) another; WithCache,
// WithFailureCache and WithServiceAccountToken wrap one to add what the kubelet does around
// the plugin. Implementations must be safe for concurrent use.
type Provider interface {
	Provide(ctx context.Context, req *Request) (*Response, error)
}

// Request asks a Provider for credentials for one image.
type Request struct {
	// Image is a normalised repository (see NormalizeImage): what the plugin receives,
	// and what the cache keys by.
	Image string
	// ServiceAccount is the service-account side of the request, for a provider with
	// tokenAttributes asked about a pod that has a service account; nil otherwise.
	ServiceAccount *ServiceAccountRequest
}

// ServiceAccountRequest is the pod's service account as a provider with tokenAttributes
// sees it. The Keyring fills in everything but Token, which WithServiceAccountToken
// requests. The account (Namespace, Name, UID) and Annotations are part of every cache key,
// and so is the token's hash when Token is set before the cache sees the request
// (cacheType Token).
type ServiceAccountRequest struct {
	Namespace string
	Name      string
	UID       types.UID
	// Annotations are the account's annotations under the configured required and
	// optional keys: what the plugin receives as serviceAccountAnnotations.
	Annotations map[string]string
	// PodName and PodUID are the pod the token is bound to.
	PodName string
	PodUID  types.UID
	// Token is the service-account token for the provider's audience; empty until
	// requested.
	Token string
}

// Response is a provider's answer, a CredentialProviderResponse: the SDK's type, so that
// an in-process plugin's answer needs no conversion. One Response may be shared by the
// callers of one plugin run and by the cache: do not modify it.
type Response = plugin.Response

// AuthConfig is a registry username and password, as a provider plugin returns them.
type AuthConfig = plugin.AuthConfig

// ProviderError says which provider failed for which image, and why.
type ProviderError struct {
	Provider string
	Path     string // the plugin binary; empty for an in-process provider
	Image    string
	Err      error
}

func (e *ProviderError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("imagecred: provider %q for image %q: %v", e.Provider, e.Image, e.Err)
	}
	return fmt.Sprintf("imagecred: provider %q (%s) for image %q: %v", e.Provider, e.Path, e.Image, e.Err)
}

func (e *ProviderError) Unwrap() error { return e.Err }

// Errors a provider returns, wrapped in a *ProviderError, when it did not run its plugin
// or rejected its answer.
var (
	ErrNoServiceAccount    = errors.New("the provider requires a service account and the pod has none (pass the pod)")
	ErrRequiredAnnotation  = errors.New("the service account lacks a required annotation")
	ErrTokenEchoed         = errors.New("the plugin returned the service account token as a password, which is only allowed with tokenAttributes.cacheType Token")
	ErrInvalidCacheKeyType = errors.New("the plugin did not return a valid cacheKeyType")

	errServiceAccountsMissing = errors.New("the provider needs service-account tokens but no Kubernetes client was configured (pass a kubeconfig)")
	errNoResponse             = errors.New("the plugin returned no response")
)

// checkResponse rejects an answer the kubelet would not use: one without a valid
// cacheKeyType.
func checkResponse(resp *Response) error {
	switch resp.CacheKeyType {
	case plugin.CacheImage, plugin.CacheRegistry, plugin.CacheGlobal:
		return nil
	}
	return fmt.Errorf("%w: %q", ErrInvalidCacheKeyType, resp.CacheKeyType)
}

// FuncProvider makes an in-process plugin a Provider: f gets the request a plugin binary
// would read on stdin (in version credentialprovider.kubelet.k8s.io/v1), and its answer is
// checked as Plugin checks a plugin's. Nothing is encoded or run, so an SDK plugin can serve
// a Keyring, or a test, without a binary. f must be safe for concurrent use.
func FuncProvider(f plugin.Func) Provider { return funcProvider(f) }

type funcProvider plugin.Func

func (f funcProvider) Provide(ctx context.Context, req *Request) (*Response, error) {
	preq := &plugin.Request{Image: req.Image, APIVersion: APIVersionV1}
	if sa := req.ServiceAccount; sa != nil {
		preq.ServiceAccountToken = sa.Token
		if len(sa.Annotations) > 0 { // omitted on the wire when empty
			preq.ServiceAccountAnnotations = maps.Clone(sa.Annotations)
		}
	}
	resp, err := f(ctx, preq)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, errNoResponse
	}
	if err := checkResponse(resp); err != nil {
		return nil, err
	}
	return resp, nil
}
