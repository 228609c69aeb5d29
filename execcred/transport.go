package execcred

import (
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Transport is an http.RoundTripper that authenticates requests with an Authenticator's
// bearer token. A request that already has an Authorization header is sent as it is, and the
// plugin is not run for it. On a 401 the credential is refreshed (once per generation), and
// with RetryAfterRefresh a request whose body can be replayed is sent once more with the
// new credential. The caller's request is never modified.
type Transport struct {
	Auth *Authenticator
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// RetryAfterRefresh sends a rejected request again after a successful refresh, when its
	// body is empty or can be recreated (GetBody). client-go returns the 401 instead.
	RetryAfterRefresh bool

	// tokenOnly is set by ConfigFor, whose transports cannot present a client certificate.
	tokenOnly bool
}

// NewTransport returns a Transport that fits rest.Config.Wrap.
func NewTransport(auth *Authenticator, retry bool) func(http.RoundTripper) http.RoundTripper {
	return func(base http.RoundTripper) http.RoundTripper {
		return &Transport{Auth: auth, Base: base, RetryAfterRefresh: retry}
	}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" {
		return t.base().RoundTrip(req)
	}
	cred, err := t.Auth.Credential(req.Context())
	if err != nil {
		return nil, fmt.Errorf("getting credentials: %w", err)
	}
	if t.tokenOnly && cred.Certificate != nil {
		return nil, errCertificateInConfig
	}
	resp, err := t.base().RoundTrip(withCredential(req, cred))
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	fresh, err := t.Auth.Refresh(req.Context(), cred, resp)
	if err != nil || fresh == cred || !t.RetryAfterRefresh {
		// As client-go does, a failed refresh keeps the old credential and returns the 401.
		return resp, nil
	}
	retry, err := replay(req)
	if err != nil {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return t.base().RoundTrip(withCredential(retry, fresh))
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// withCredential returns a copy of req with the bearer token set, or req itself when the
// credential has no token (a client certificate alone). The copy shares everything with
// req but its header map, so that req is never modified; header values are shared, as
// nothing below a RoundTripper changes them.
func withCredential(req *http.Request, cred *Credential) *http.Request {
	if cred.Token == "" {
		return req
	}
	r := new(http.Request)
	*r = *req
	r.Header = make(http.Header, len(req.Header)+1)
	for k, v := range req.Header {
		r.Header[k] = v
	}
	r.Header["Authorization"] = cred.bearer()
	return r
}

var errCertificateInConfig = errors.New("execcred: the plugin returned a client certificate, which a client-go config adapted by ConfigFor cannot present; use execcred.HTTPTransport")

var errNotReplayable = errors.New("request body cannot be replayed")

func replay(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return r, nil
	}
	if req.GetBody == nil {
		return nil, errNotReplayable
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r.Body = body
	return r, nil
}
