package execcred

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultMaxBackoff caps a WithBackoff whose Max is zero.
const DefaultMaxBackoff = 5 * time.Minute

// BackoffOptions configure WithBackoff.
type BackoffOptions struct {
	// Initial is the wait after the first failure; it doubles with each further one. Zero
	// or negative lets every call through.
	Initial time.Duration
	// Max caps the wait; zero means DefaultMaxBackoff.
	Max time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// WithBackoff returns src under the decorator that stops a failing src from being called
// again until an exponential backoff has passed: meanwhile it returns a *BackoffError wrapping the last
// failure. client-go runs a failing plugin again on every request (kubernetes#78321).
// A success resets it. A failure caused by the caller's own context ending does not count.
//
// The result is safe for concurrent use. A src that WithBackoff returned is returned as it
// is.
func WithBackoff(src Source, o BackoffOptions) Source {
	if src == nil {
		panic("execcred: WithBackoff of a nil Source")
	}
	if b, ok := src.(*backoff); ok {
		return b
	}
	return &backoff{Source: src, Initial: o.Initial, Max: o.Max, Now: o.Now}
}

// backoff is WithBackoff's decorator.
type backoff struct {
	Source Source
	// Initial is the wait after the first failure; it doubles with each further one.
	Initial time.Duration
	// Max caps the wait; zero means DefaultMaxBackoff.
	Max time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu       sync.Mutex
	failures int
	retryAt  time.Time
	lastErr  error
}

// BackoffError is what WithBackoff's decorator returns while it holds: the last failure,
// and when the source may be called again.
type BackoffError struct {
	Err      error // the last failure, e.g. a *PluginError
	Failures int   // consecutive failures so far
	RetryAt  time.Time
	wait     time.Duration // from when the error was made to RetryAt
}

func (e *BackoffError) Error() string {
	return fmt.Sprintf("%v (not run again for %v after %d failures)", e.Err, e.wait.Round(time.Millisecond), e.Failures)
}

func (e *BackoffError) Unwrap() error { return e.Err }

// Credential calls Source, unless a backoff holds.
func (b *backoff) Credential(ctx context.Context, rejected *Rejection) (*Credential, error) {
	b.mu.Lock()
	if now := b.now(); now.Before(b.retryAt) {
		err := &BackoffError{Err: b.lastErr, Failures: b.failures, RetryAt: b.retryAt, wait: b.retryAt.Sub(now)}
		b.mu.Unlock()
		return nil, err
	}
	b.mu.Unlock()
	cred, err := b.Source.Credential(ctx, rejected)
	if err != nil && ctx.Err() != nil {
		return nil, err // the caller gave up: not the source's failure
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.failures++
		b.lastErr = err
		b.retryAt = b.now().Add(b.after(b.failures))
		return nil, err
	}
	b.failures, b.retryAt, b.lastErr = 0, time.Time{}, nil
	return cred, nil
}

// after is the wait after n consecutive failures.
func (b *backoff) after(n int) time.Duration {
	if b.Initial <= 0 {
		return 0
	}
	limit := b.Max
	if limit <= 0 {
		limit = DefaultMaxBackoff
	}
	d := b.Initial
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

func (b *backoff) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}
