package execcred

import "context"

// Source gives out credentials: one method, in the spirit of oauth2.TokenSource, so that
// caching, refresh-ahead, backoff and metrics are wrappers around a source rather than
// options of one. Plugin runs an exec plugin; FuncSource runs a plugin function
// in-process; WithCache, WithRefreshAhead, WithBackoff and Metrics.ObserveCredentials
// wrap a source; Transport spends what the outermost one gives.
//
// Credential returns a credential, or an error that says what failed. rejected is nil,
// unless the caller asks for a credential other than rejected.Credential, one that an
// earlier call returned: the server answered 401 to it (rejected.Response), or it is about
// to expire. A source that keeps credentials must then not return that one again. The
// returned credential is never nil when the error is nil, and is never modified
// afterwards. Implementations are safe for concurrent use.
type Source interface {
	Credential(ctx context.Context, rejected *Rejection) (*Credential, error)
}

// Rejection says which credential a caller wants replaced, and why.
type Rejection struct {
	// Credential is the credential to replace: one a previous call returned.
	Credential *Credential
	// Response is the server's 401 (its code and headers), which a v1alpha1 plugin is
	// sent as spec.response; nil when the credential was not rejected by a server (it is
	// about to expire, or an exec proxy stopped answering).
	Response *Response
}

// SourceFunc adapts a function to a Source, as http.HandlerFunc does for handlers.
type SourceFunc func(ctx context.Context, rejected *Rejection) (*Credential, error)

// Credential calls f.
func (f SourceFunc) Credential(ctx context.Context, rejected *Rejection) (*Credential, error) {
	return f(ctx, rejected)
}
