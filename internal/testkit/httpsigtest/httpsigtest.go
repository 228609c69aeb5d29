// Package httpsigtest is an API server stand-in for tests of request signing: it verifies
// each request's KEP-6308 signature with httpsig.Verify and records what it saw, so that
// the signing client under test is checked by the package that defines the profile.
package httpsigtest

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/kplug/kplug/httpsig"
)

// Request is what the server saw of one request.
type Request struct {
	Method, Path, Body, KeyID, Authorization string
	// Err says why Verify refused the request; empty when it was accepted.
	Err string
}

// Server verifies signatures under a policy that requires X-K8s-Audience to be Audience.
// Certificate keys are trusted as they come (chain checks are the verifier's, not under
// test here); other key IDs are looked up in Keys (a crypto.PublicKey, or []byte for
// hmac-sha256). An accepted request gets 200 and its key ID as the body, a refused one
// 401.
type Server struct {
	*httptest.Server
	Audience string
	Keys     map[string]any

	mu   sync.Mutex
	seen []Request
}

// NewTLS starts a TLS Server for t (NewTLSServer's certificate), closed when t ends.
func NewTLS(t testing.TB, audience string, keys map[string]any) *Server {
	s := &Server{Audience: audience, Keys: keys}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// New starts a plain HTTP Server for t.
func New(t testing.TB, audience string, keys map[string]any) *Server {
	s := &Server{Audience: audience, Keys: keys}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	seen := Request{Method: r.Method, Path: r.URL.Path, Authorization: r.Header.Get("Authorization")}
	policy := httpsig.Policy{RequiredHeaders: map[string][]string{httpsig.AudienceHeader: {s.Audience}}}
	sig, err := httpsig.Verify(r, policy, func(sig *httpsig.Signature) (any, error) {
		if sig.Certificate != nil {
			return sig.Certificate.PublicKey, nil
		}
		if k, ok := s.Keys[sig.KeyID]; ok {
			return k, nil
		}
		return nil, errors.New("unknown key")
	})
	body, _ := io.ReadAll(r.Body)
	seen.Body = string(body)
	if err != nil {
		seen.Err = err.Error()
	} else {
		seen.KeyID = sig.KeyID
	}
	s.mu.Lock()
	s.seen = append(s.seen, seen)
	s.mu.Unlock()
	if err != nil {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, sig.KeyID)

}

// Requests returns what the server saw so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.seen...)
}
