// Package kubeapi reads what image credential providers with service-account tokens need
// from the API server, with client-go's typed clientset: the pod an image is pulled for,
// its service account, and tokens bound to it (imagecred.ServiceAccounts). It is a package
// of its own so that users of imagecred that bring their own ServiceAccounts do not link
// the clientset.
package kubeapi

import (
	"context"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kplug/kplug/imagecred"
)

// GetPod reads a pod with client: its UID and service account, what Lookup needs to know
// about the pod an image is pulled for.
func GetPod(ctx context.Context, client kubernetes.Interface, namespace, name string) (*imagecred.Pod, error) {
	p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	return &imagecred.Pod{Namespace: namespace, Name: name, UID: p.UID, ServiceAccountName: p.Spec.ServiceAccountName}, nil
}

// Options configure NewServiceAccounts.
type Options struct {
	// LookupTTL is how long a service account read is reused; zero means 30 seconds,
	// negative disables the cache.
	LookupTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// NewServiceAccounts reads service accounts and requests tokens with client. Service
// accounts are cached for LookupTTL; a token is reused until 80 % of its lifetime has
// passed, as the kubelet's token manager does. The result is safe for concurrent use.
func NewServiceAccounts(client kubernetes.Interface, o Options) imagecred.ServiceAccounts {
	if o.LookupTTL == 0 {
		o.LookupTTL = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &kubeServiceAccounts{client: client, opts: o, accounts: map[string]cachedAccount{}, tokens: map[imagecred.TokenRequest]cachedToken{}}
}

type kubeServiceAccounts struct {
	client   kubernetes.Interface
	opts     Options
	mu       sync.Mutex
	accounts map[string]cachedAccount
	tokens   map[imagecred.TokenRequest]cachedToken
}

type cachedAccount struct {
	sa    *imagecred.ServiceAccount
	until time.Time
}

type cachedToken struct {
	token   string
	refresh time.Time // when to ask for a new one
}

func (k *kubeServiceAccounts) ServiceAccount(ctx context.Context, namespace, name string) (*imagecred.ServiceAccount, error) {
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
	sa := &imagecred.ServiceAccount{UID: obj.UID, Annotations: obj.Annotations}
	if k.opts.LookupTTL > 0 {
		k.mu.Lock()
		k.accounts[key] = cachedAccount{sa: sa, until: now.Add(k.opts.LookupTTL)}
		k.mu.Unlock()
	}
	return sa, nil
}

func (k *kubeServiceAccounts) Token(ctx context.Context, req imagecred.TokenRequest) (string, error) {
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
