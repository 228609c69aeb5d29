package execcred

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
)

// Transport is the end of the pipeline: an http.RoundTripper that authenticates requests
// with its Source's credential, and, for the TLS layer below it, the hooks that present the
// credential's client certificate and close connections when that certificate changes.
//
// RoundTrip adds the bearer token, or, for a credential with signing material
// (Credential.HTTPSignature), signs a copy of the request with it (KEP-6308); a request that already has an Authorization header is
// sent as it is, and the source is not asked. On a 401 the credential is replaced (the
// source is asked with a Rejection, which WithCache turns into one plugin run per
// generation), and with RetryAfterRefresh a request whose body can be replayed is sent once
// more with the new credential. The caller's request is never modified.
//
// For a client certificate, set GetClientCertificate and DialContext on the base
// http.Transport (HTTPTransport does): connections dialled through DialContext are closed
// when a request finds that the certificate changed, as client-go closes them, so that new
// ones present the new certificate; a token change keeps them.
//
// Source must be set. A Transport is safe for concurrent use and must not be copied after
// first use.
type Transport struct {
	Source Source
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// RetryAfterRefresh sends a rejected request again after a successful refresh, when its
	// body is empty or can be recreated (GetBody). client-go returns the 401 instead.
	RetryAfterRefresh bool

	// tokenOnly is set by WrapTransport, whose base transports cannot present a
	// client certificate.
	tokenOnly bool

	mu    sync.Mutex
	used  bool                      // a credential has been seen
	seq   uint64                    // the newest credential seen (Credential.seq)
	cert  []byte                    // the leaf (DER) of its certificate, nil for none
	conns map[*trackedConn]struct{} // connections dialled through DialContext
}

// WrapTransport returns a function for rest.Config.Wrap that adds src's bearer token to
// every transport client-go builds from the config (REST calls, watches, SPDY and
// WebSocket upgrades), with RetryAfterRefresh. client-go's transports cannot present a client certificate from
// here: a request for which src returns one fails with an error saying to use
// HTTPTransport.
func WrapTransport(src Source) func(http.RoundTripper) http.RoundTripper {
	return func(base http.RoundTripper) http.RoundTripper {
		return &Transport{Source: src, Base: base, RetryAfterRefresh: true, tokenOnly: true}
	}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" {
		return t.base().RoundTrip(req)
	}
	cred, err := t.Source.Credential(req.Context(), nil)
	if err != nil {
		return nil, fmt.Errorf("getting credentials: %w", err)
	}
	if t.tokenOnly && cred.Certificate != nil {
		return nil, errCertificateInConfig
	}
	t.seen(cred)
	resp, err := t.send(req, cred)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	fresh, err := t.Source.Credential(req.Context(), &Rejection{Credential: cred, Response: responseInfo(resp)})
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
	t.seen(fresh)
	return t.send(retry, fresh)
}

// send sends req with cred: signed with its signing material, or with its token.
func (t *Transport) send(req *http.Request, cred *Credential) (*http.Response, error) {
	if cred.HTTPSignature != nil {
		return cred.HTTPSignature.RoundTripper(t.base()).RoundTrip(req)
	}
	return t.base().RoundTrip(withCredential(req, cred))
}

// GetClientCertificate is a tls.Config hook that presents the source's client
// certificate, asking the source if needed. With no certificate it presents none.
func (t *Transport) GetClientCertificate(info *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	ctx := context.Background()
	if info != nil && info.Context() != nil {
		ctx = info.Context()
	}
	cred, err := t.Source.Credential(ctx, nil)
	if err != nil {
		return nil, err
	}
	if cred.Certificate == nil {
		return &tls.Certificate{}, nil
	}
	return cred.Certificate, nil
}

// DialContext wraps dial (nil means a net.Dialer) so that the connections it makes are
// closed when the certificate changes.
func (t *Transport) DialContext(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: conn, t: t}
		t.mu.Lock()
		if t.conns == nil {
			t.conns = map[*trackedConn]struct{}{}
		}
		t.conns[tc] = struct{}{}
		t.mu.Unlock()
		return tc, nil
	}
}

// seen notes the certificate of a credential about to be used, and closes the tracked
// connections if it differs from the newest one before: they presented the old one.
// Connections dialled after the change is noted are not closed, and a request that still
// holds an older credential changes nothing.
func (t *Transport) seen(cred *Credential) {
	var leaf []byte
	if cred.Certificate != nil {
		leaf = cred.Certificate.Certificate[0]
	}
	t.mu.Lock()
	stale := cred.seq != 0 && cred.seq < t.seq
	if stale || t.used && bytes.Equal(leaf, t.cert) && (leaf == nil) == (t.cert == nil) {
		t.seq = max(t.seq, cred.seq)
		t.mu.Unlock()
		return
	}
	t.used, t.seq, t.cert = true, max(t.seq, cred.seq), leaf
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	t    *Transport
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
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

func responseInfo(r *http.Response) *Response {
	return &Response{Header: r.Header.Clone(), Code: int32(r.StatusCode)} //nolint:gosec // HTTP status codes fit
}

// certChanged reports whether cur presents another client certificate than old.
func certChanged(old, cur *Credential) bool {
	if (old.Certificate == nil) != (cur.Certificate == nil) {
		return true
	}
	return old.Certificate != nil && !bytes.Equal(old.Certificate.Certificate[0], cur.Certificate.Certificate[0])
}
