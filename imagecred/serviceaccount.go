package imagecred

import (
	"context"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Pod identifies the pod an image is pulled for. Providers with tokenAttributes use it to get
// a token for ServiceAccountName bound to the pod.
type Pod struct {
	Namespace          string
	Name               string
	UID                types.UID
	ServiceAccountName string
}

// GetPod reads a pod with client: its UID and service account, what Lookup needs to know
// about the pod an image is pulled for.
func GetPod(ctx context.Context, client kubernetes.Interface, namespace, name string) (*Pod, error) {
	p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	return &Pod{Namespace: namespace, Name: name, UID: p.UID, ServiceAccountName: p.Spec.ServiceAccountName}, nil
}

// ServiceAccount is what a provider needs to know about the pod's service account.
type ServiceAccount struct {
	UID         types.UID
	Annotations map[string]string
}

// TokenRequest asks for a service-account token for one audience, bound to a pod.
type TokenRequest struct {
	Namespace         string
	ServiceAccount    string
	ServiceAccountUID types.UID
	Audience          string
	PodName           string
	PodUID            types.UID
}

// ServiceAccounts reads service accounts and requests their tokens, as the kubelet does from
// the API server. Implementations must be safe for concurrent use.
type ServiceAccounts interface {
	ServiceAccount(ctx context.Context, namespace, name string) (*ServiceAccount, error)
	Token(ctx context.Context, req TokenRequest) (string, error)
}

// ServiceAccountsOptions configures NewServiceAccounts.
type ServiceAccountsOptions struct {
	// LookupTTL is how long a service account read is reused; zero means 30 seconds,
	// negative disables the cache.
	LookupTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// NewServiceAccounts reads service accounts and requests tokens with client. Service
// accounts are cached for LookupTTL; a token is reused until 80 % of its lifetime has
// passed, as the kubelet's token manager does. The result is safe for concurrent use.
func NewServiceAccounts(client kubernetes.Interface, o ServiceAccountsOptions) ServiceAccounts {
	if o.LookupTTL == 0 {
		o.LookupTTL = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &kubeServiceAccounts{client: client, opts: o, accounts: map[string]cachedAccount{}, tokens: map[TokenRequest]cachedToken{}}
}

type kubeServiceAccounts struct {
	client   kubernetes.Interface
	opts     ServiceAccountsOptions
	mu       sync.Mutex
	accounts map[string]cachedAccount
	tokens   map[TokenRequest]cachedToken
}

type cachedAccount struct {
	sa    *ServiceAccount
	until time.Time
}

type cachedToken struct {
	token   string
	refresh time.Time // when to ask for a new one
}

func (k *kubeServiceAccounts) ServiceAccount(ctx context.Context, namespace, name string) (*ServiceAccount, error) {
	key := namespace + "/" + name
	now := k.opts.Now()
	k.mu.Lock()
	c, ok := k.accounts[key]
	k.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.sa, nil
	}
	obj, err := k.client.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get service account %s: %w", key, err)
	}
	sa := &ServiceAccount{UID: obj.UID, Annotations: obj.Annotations}
	if k.opts.LookupTTL > 0 {
		k.mu.Lock()
		k.accounts[key] = cachedAccount{sa: sa, until: now.Add(k.opts.LookupTTL)}
		k.mu.Unlock()
	}
	return sa, nil
}

func (k *kubeServiceAccounts) Token(ctx context.Context, req TokenRequest) (string, error) {
	now := k.opts.Now()
	k.mu.Lock()
	c, ok := k.tokens[req]
	k.mu.Unlock()
	if ok && now.Before(c.refresh) {
		return c.token, nil
	}
	tr := &authenticationv1.TokenRequest{
		ObjectMeta: metav1.ObjectMeta{UID: req.ServiceAccountUID},
		Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{req.Audience},
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				APIVersion: "v1", Kind: "Pod", Name: req.PodName, UID: req.PodUID,
			},
		},
	}
	out, err := k.client.CoreV1().ServiceAccounts(req.Namespace).CreateToken(ctx, req.ServiceAccount, tr, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request token for service account %s/%s: %w", req.Namespace, req.ServiceAccount, err)
	}
	token := out.Status.Token
	expires := out.Status.ExpirationTimestamp.Time
	if !expires.IsZero() && expires.After(now) {
		refresh := now.Add(expires.Sub(now) * 8 / 10)
		k.mu.Lock()
		for key, old := range k.tokens {
			if !now.Before(old.refresh) {
				delete(k.tokens, key)
			}
		}
		k.tokens[req] = cachedToken{token: token, refresh: refresh}
		k.mu.Unlock()
	}
	return token, nil
}
