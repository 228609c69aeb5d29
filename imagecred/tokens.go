package imagecred

import (
	"context"
	"time"

	kubeletv1 "k8s.io/kubelet/config/v1"
)

// ServiceAccountTokenOptions configures WithServiceAccountToken: the provider's
// tokenAttributes, and where tokens come from.
type ServiceAccountTokenOptions struct {
	// Audience is tokenAttributes.serviceAccountTokenAudience.
	Audience string
	// CacheType is tokenAttributes.cacheType. With Token, a plugin may answer with the
	// token itself as a password; otherwise such an answer is rejected (ErrTokenEchoed).
	CacheType kubeletv1.ServiceAccountTokenCacheType
	// ServiceAccounts requests the tokens.
	ServiceAccounts ServiceAccounts
	// Timeout bounds each TokenRequest; zero means DefaultTimeout. Inside WithCache the
	// request runs detached from the callers, and this is what ends it.
	Timeout time.Duration
}

// WithServiceAccountToken returns a Provider that requests a token for the request's
// service account (for the audience, bound to the pod, with the account's UID as the
// kubelet 1.34+ sets it) and passes it to p with the request. A request without a service
// account goes to p as it is.
//
// Where it sits decides what the cache keys by. For cacheType ServiceAccount, wrap it in
// WithCache: the cache is checked before a token is requested, so a hit costs no
// TokenRequest (the kubelet requests one on every pull), and the pods of one service account
// share one answer. For cacheType Token, wrap WithCache in it: the token's hash is then part
// of every key, so each pod has its own entries. New stacks it so.
//
// A p that WithServiceAccountToken returned is returned as it is: a second one would
// request a second token for every pull.
func WithServiceAccountToken(p Provider, o ServiceAccountTokenOptions) Provider {
	if t, ok := p.(*tokenProvider); ok {
		return t
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return &tokenProvider{next: p, opts: o}
}

type tokenProvider struct {
	next Provider
	opts ServiceAccountTokenOptions
}

func (t *tokenProvider) Provide(ctx context.Context, req *Request) (*Response, error) {
	sa := req.ServiceAccount
	if sa == nil {
		return t.next.Provide(ctx, req)
	}
	if t.opts.ServiceAccounts == nil {
		return nil, errServiceAccountsMissing
	}
	token, err := t.token(ctx, sa)
	if err != nil {
		return nil, err
	}
	withToken := *sa
	withToken.Token = token
	r := *req
	r.ServiceAccount = &withToken
	resp, err := t.next.Provide(ctx, &r)
	if err != nil {
		return nil, err
	}
	// A plugin that echoes the token would make the token a credential cached beyond its
	// pod; the kubelet allows that only when entries are per token.
	if token != "" && t.opts.CacheType != kubeletv1.TokenServiceAccountTokenCacheType {
		for _, a := range resp.Auth {
			if a.Password == token {
				return nil, ErrTokenEchoed
			}
		}
	}
	return resp, nil
}

func (t *tokenProvider) token(ctx context.Context, sa *ServiceAccountRequest) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, t.opts.Timeout)
	defer cancel()
	return t.opts.ServiceAccounts.Token(ctx, TokenRequest{
		Namespace:         sa.Namespace,
		ServiceAccount:    sa.Name,
		ServiceAccountUID: sa.UID,
		Audience:          t.opts.Audience,
		PodName:           sa.PodName,
		PodUID:            sa.PodUID,
	})
}
