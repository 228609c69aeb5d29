package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// RFC 8693 identifiers; not credentials.
//
//nolint:gosec // G101 mistakes the URNs for credentials
const (
	GrantTypeTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	TokenTypeJWT           = "urn:ietf:params:oauth:token-type:jwt"
	TokenTypeAccessToken   = "urn:ietf:params:oauth:token-type:access_token"
)

// TokenExchangeOptions configures TokenExchange.
type TokenExchangeOptions struct {
	// Endpoint is the OAuth 2.0 token endpoint that performs the exchange.
	Endpoint string
	// Audience, Resource and Scope are sent as the RFC 8693 parameters of the same names
	// when set.
	Audience, Resource, Scope string
	// Username goes with the exchanged token as the registry password; registries
	// differ in what they expect ("oauth2accesstoken", "<token>", a fixed GUID).
	Username string
	// CacheKeyType is returned with the credentials; empty means Registry.
	CacheKeyType CacheKeyType
	// Client sends the request; nil means a client with a 30 s timeout.
	Client *http.Client
}

// TokenExchange returns a plugin that exchanges the request's service-account token for a
// registry access token at an OAuth 2.0 Token Exchange (RFC 8693) endpoint, and answers
// with it as the password for the image's registry. The answer's cacheDuration is 90 % of
// the access token's lifetime (expires_in), or absent when the endpoint does not say.
func TokenExchange(o TokenExchangeOptions) Func {
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if o.CacheKeyType == "" {
		o.CacheKeyType = CacheRegistry
	}
	return func(ctx context.Context, req *Request) (*Response, error) {
		if req.ServiceAccountToken == "" {
			return nil, errors.New("token-exchange: the request has no service account token; configure tokenAttributes for this provider (credentialprovider.kubelet.k8s.io/v1)")
		}
		tok, err := exchange(ctx, o, req.ServiceAccountToken)
		if err != nil {
			return nil, err
		}
		registry, _, _ := strings.Cut(req.Image, "/")
		resp := &Response{
			CacheKeyType: o.CacheKeyType,
			Auth:         map[string]AuthConfig{registry: {Username: o.Username, Password: tok.AccessToken}},
		}
		if tok.ExpiresIn != nil {
			d := max(time.Duration(*tok.ExpiresIn)*time.Second*9/10, 0)
			resp.CacheDuration = &d
		}
		return resp, nil
	}
}

type tokenResponse struct {
	AccessToken     string `json:"access_token"`
	IssuedTokenType string `json:"issued_token_type"`
	TokenType       string `json:"token_type"`
	ExpiresIn       *int64 `json:"expires_in"`
}

func exchange(ctx context.Context, o TokenExchangeOptions, subject string) (*tokenResponse, error) {
	form := url.Values{
		"grant_type":           {GrantTypeTokenExchange},
		"subject_token":        {subject},
		"subject_token_type":   {TokenTypeJWT},
		"requested_token_type": {TokenTypeAccessToken},
	}
	for name, v := range map[string]string{"audience": o.Audience, "resource": o.Resource, "scope": o.Scope} {
		if v != "" {
			form.Set(name, v)
		}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, o.Endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("token-exchange: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	hreq.Header.Set("Accept", "application/json")
	hresp, err := o.Client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("token-exchange: %w", err)
	}
	defer hresp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(hresp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("token-exchange: read response from %s: %w", o.Endpoint, err)
	}
	if hresp.StatusCode != http.StatusOK {
		var oauthErr struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		if json.Unmarshal(body, &oauthErr) == nil && oauthErr.Error != "" {
			return nil, fmt.Errorf("token-exchange: %s refused the exchange: %s: %s", o.Endpoint, oauthErr.Error, oauthErr.Description)
		}
		return nil, fmt.Errorf("token-exchange: %s answered %s", o.Endpoint, hresp.Status)
	}
	var tok tokenResponse
	if err := json.Unmarshal(body, &tok); err != nil {
		return nil, fmt.Errorf("token-exchange: %s answered with invalid JSON: %w", o.Endpoint, err)
	}
	if tok.AccessToken == "" {
		return nil, fmt.Errorf("token-exchange: %s answered without an access_token", o.Endpoint)
	}
	return &tok, nil
}
