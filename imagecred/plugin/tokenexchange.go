package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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
	// Endpoint is the OAuth 2.0 token endpoint that performs the exchange: an https URL,
	// since every request carries a service-account token. http is accepted only for a
	// loopback IP address (127.0.0.1, [::1]), for an exchange agent on the node itself
	// and for tests.
	Endpoint string
	// Audience, Resource and Scope are sent as the RFC 8693 parameters of the same names
	// when set.
	Audience, Resource, Scope string
	// Username goes with the exchanged token as the registry password; registries
	// differ in what they expect ("oauth2accesstoken", "<token>", a fixed GUID).
	Username string
	// CacheKeyType is returned with the credentials; empty means Registry.
	CacheKeyType CacheKeyType
	// Client sends the request; nil means a client with a 30 s timeout. Redirects are
	// never followed, whatever its CheckRedirect says: a 307 or 308 would send the
	// service-account token on to wherever the endpoint points.
	Client *http.Client
}

// TokenExchange returns a plugin that exchanges the request's service-account token for a
// registry access token at an OAuth 2.0 Token Exchange (RFC 8693) endpoint, and answers
// with it as the password for the image's registry. The answer's cacheDuration is 90 % of
// the access token's lifetime (expires_in), or absent when the endpoint does not say.
// It fails when the endpoint is not an https URL (or http to a loopback address).
func TokenExchange(o TokenExchangeOptions) (Func, error) {
	endpoint, err := checkEndpoint(o.Endpoint)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 30 * time.Second}
	if o.Client != nil {
		c := *o.Client
		client = &c
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if o.CacheKeyType == "" {
		o.CacheKeyType = CacheRegistry
	}
	x := &exchanger{opts: o, endpoint: endpoint, client: client}
	return func(ctx context.Context, req *Request) (*Response, error) {
		if req.ServiceAccountToken == "" {
			return nil, errors.New("token-exchange: the request has no service account token; configure tokenAttributes for this provider (credentialprovider.kubelet.k8s.io/v1)")
		}
		tok, err := x.exchange(ctx, req.ServiceAccountToken)
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
	}, nil
}

// checkEndpoint parses the token endpoint and refuses one the service-account token
// could be read on the way to.
func checkEndpoint(endpoint string) (*url.URL, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("token-exchange: invalid endpoint: %w", err)
	}
	switch {
	case u.Host == "":
		return nil, fmt.Errorf("token-exchange: invalid endpoint %q: want an https URL such as https://sts.example/token", u.Redacted())
	case u.Scheme == "https":
		return u, nil
	case u.Scheme == "http" && isLoopbackIP(u.Hostname()):
		return u, nil
	}
	return nil, fmt.Errorf("token-exchange: endpoint %q is not an https URL; the exchange sends the service-account token, so it must use https (http is accepted only to a loopback address such as http://127.0.0.1:PORT)", u.Redacted())
}

func isLoopbackIP(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// exchanger performs the exchange at one checked endpoint.
type exchanger struct {
	opts     TokenExchangeOptions
	endpoint *url.URL
	client   *http.Client // follows no redirect
}

type tokenResponse struct {
	AccessToken     string `json:"access_token"`
	IssuedTokenType string `json:"issued_token_type"`
	TokenType       string `json:"token_type"`
	ExpiresIn       *int64 `json:"expires_in"`
}

func (x *exchanger) exchange(ctx context.Context, subject string) (*tokenResponse, error) {
	o, endpoint := x.opts, x.endpoint.Redacted()
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
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, x.endpoint.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("token-exchange: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	hreq.Header.Set("Accept", "application/json")
	hresp, err := x.client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("token-exchange: %w", err)
	}
	defer hresp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(hresp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("token-exchange: read response from %s: %w", endpoint, err)
	}
	if hresp.StatusCode >= 300 && hresp.StatusCode < 400 {
		return nil, fmt.Errorf("token-exchange: %s answered %s, a redirect to %q; redirects are not followed, since the request carries the service-account token: configure the endpoint the redirect points to, if you trust it", endpoint, hresp.Status, redactedLocation(hresp))
	}
	if hresp.StatusCode != http.StatusOK {
		var oauthErr struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		if json.Unmarshal(body, &oauthErr) == nil && oauthErr.Error != "" {
			return nil, fmt.Errorf("token-exchange: %s refused the exchange: %s: %s", endpoint, oauthErr.Error, oauthErr.Description)
		}
		return nil, fmt.Errorf("token-exchange: %s answered %s", endpoint, hresp.Status)
	}
	var tok tokenResponse
	if err := json.Unmarshal(body, &tok); err != nil {
		return nil, fmt.Errorf("token-exchange: %s answered with invalid JSON: %w", endpoint, err)
	}
	if tok.AccessToken == "" {
		return nil, fmt.Errorf("token-exchange: %s answered without an access_token", endpoint)
	}
	return &tok, nil
}

// redactedLocation is where a redirect points, without its query (which may carry
// anything) or a password.
func redactedLocation(resp *http.Response) string {
	u, err := resp.Location()
	if err != nil {
		return "(no valid Location)"
	}
	u.RawQuery, u.Fragment = "", ""
	return u.Redacted()
}
