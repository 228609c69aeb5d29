package execcred

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// DefaultRefreshBefore is how long before expiry WithRefreshAhead refreshes by default.
const DefaultRefreshBefore = time.Minute

// RefreshAheadOptions configure WithRefreshAhead.
type RefreshAheadOptions struct {
	// Before: a credential is refreshed this long before its expiry, or at the middle of
	// its lifetime if that comes later. Zero means DefaultRefreshBefore.
	Before time.Duration
	// Logger receives failed refreshes; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// WithRefreshAhead returns src under the decorator that replaces a credential in the
// background shortly before it expires, while callers keep getting the old one, so that a long-running
// client never sends an expired credential nor waits for a plugin. client-go has no such
// thing: its requests wait for the plugin once the credential has expired.
//
// src must keep credentials until asked to replace them, as WithCache's does: it is asked
// with a Rejection that has no Response. One refresh runs at a time. A refresh that fails
// is logged, not returned (nobody waits for it), and is tried again on a later call, or
// once a WithBackoff below allows.
//
// The result is safe for concurrent use. A src that WithRefreshAhead returned is returned
// as it is.
func WithRefreshAhead(src Source, o RefreshAheadOptions) Source {
	if src == nil {
		panic("execcred: WithRefreshAhead of a nil Source")
	}
	if r, ok := src.(*refreshAhead); ok {
		return r
	}
	return &refreshAhead{Source: src, Before: o.Before, Logger: o.Logger, Now: o.Now}
}

// refreshAhead is WithRefreshAhead's decorator.
type refreshAhead struct {
	Source Source
	// Before: a credential is refreshed this long before its expiry, or at the middle of
	// its lifetime if that comes later. Zero means DefaultRefreshBefore.
	Before time.Duration
	// Logger receives failed refreshes; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu      sync.Mutex
	cred    *Credential // the newest credential Source returned
	since   time.Time   // when: the start of its lifetime, as far as we know
	running bool
	retryAt time.Time // set by a WithBackoff below that refused the last refresh
}

// Credential returns Source's credential, and starts a refresh if it is due.
func (r *refreshAhead) Credential(ctx context.Context, rejected *Rejection) (*Credential, error) {
	cred, err := r.Source.Credential(ctx, rejected)
	if err != nil {
		return nil, err
	}
	now := r.now()
	r.mu.Lock()
	r.record(cred, now)
	start := !r.running && r.due(now) && !now.Before(r.retryAt)
	r.running = r.running || start
	r.mu.Unlock()
	if start {
		// The refresh outlives this caller, who has a credential already.
		go r.refresh(context.WithoutCancel(ctx), cred)
	}
	return cred, nil
}

func (r *refreshAhead) refresh(ctx context.Context, old *Credential) {
	fresh, err := r.Source.Credential(ctx, &Rejection{Credential: old})
	r.mu.Lock()
	r.running = false
	var backoff *BackoffError
	switch {
	case err == nil:
		r.record(fresh, r.now())
	case errors.As(err, &backoff):
		r.retryAt = backoff.RetryAt // the failure itself was logged when it happened
		err = nil
	}
	r.mu.Unlock()
	if err != nil && r.Logger != nil {
		r.Logger.Warn("refreshing the exec credential ahead of its expiry failed; the current one is used until it expires", "error", err)
	}
}

// record keeps cred, if it is new, as received at now. r.mu is held.
func (r *refreshAhead) record(cred *Credential, now time.Time) {
	if cred != r.cred {
		r.cred, r.since = cred, now
	}
}

// due reports whether r.cred is close enough to its expiry to refresh. r.mu is held.
func (r *refreshAhead) due(now time.Time) bool {
	c := r.cred
	if c.Expiry.IsZero() {
		return false
	}
	before := r.Before
	if before <= 0 {
		before = DefaultRefreshBefore
	}
	before = min(before, c.Expiry.Sub(r.since)/2)
	return !now.Before(c.Expiry.Add(-before))
}

func (r *refreshAhead) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
