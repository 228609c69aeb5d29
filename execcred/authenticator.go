package execcred

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Options tune an Authenticator beyond client-go's behaviour. The zero value behaves like
// client-go, with refresh-ahead on.
type Options struct {
	Host Host
	// RefreshBefore refreshes a credential this long before it expires (at most half its
	// lifetime), in the background, while the old one is still served. Zero means
	// DefaultRefreshBefore; negative turns refresh-ahead off.
	RefreshBefore time.Duration
	// Backoff, if Initial is positive, stops the plugin from being re-run after a failure
	// until the backoff passes; the failure is returned meanwhile. client-go re-runs a
	// failing plugin on every request.
	Backoff Backoff
	// Metrics, if set, records client-go's exec plugin metrics.
	Metrics *Metrics
	// Logger receives refresh failures that are not returned to a caller; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DefaultRefreshBefore is how long before expiry a credential is refreshed by default.
const DefaultRefreshBefore = time.Minute

// Backoff is an exponential backoff after failed plugin runs.
type Backoff struct {
	Initial time.Duration // first wait after a failure; zero or negative turns backoff off
	Max     time.Duration // the wait never grows beyond this; zero means 5 minutes
}

func (b Backoff) after(failures int) time.Duration {
	if b.Initial <= 0 || failures == 0 {
		return 0
	}
	limit := b.Max
	if limit <= 0 {
		limit = 5 * time.Minute
	}
	d := b.Initial
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// Authenticator caches one plugin's credential. It runs the plugin when there is no
// credential or it has expired (strictly after its expirationTimestamp), once for any
// number of concurrent callers, and again when the server rejects the credential.
// It is safe for concurrent use.
type Authenticator struct {
	plugin *Plugin
	opts   Options
	conns  connTracker

	mu       sync.Mutex
	cred     *Credential
	fetched  time.Time
	flight   *flight
	failures int
	retryAt  time.Time
	lastErr  error
}

// flight is one plugin run that any number of callers wait for.
type flight struct {
	done  chan struct{}
	ahead bool // a refresh ahead of expiry, whose failure no caller is waiting for
	cred  *Credential
	err   error
}

// New validates cfg and returns an Authenticator for it.
func New(cfg Config, opts Options) (*Authenticator, error) {
	p, err := NewPlugin(cfg, opts.Host)
	if err != nil {
		return nil, err
	}
	a := &Authenticator{plugin: p, opts: opts}
	if opts.Metrics != nil {
		p.observe = opts.Metrics.observeCall
	}
	return a, nil
}

// Credential returns the cached credential, or runs the plugin for a new one. If ctx ends
// first, Credential returns ctx's error; the plugin run goes on for the other callers.
func (a *Authenticator) Credential(ctx context.Context) (*Credential, error) {
	a.mu.Lock()
	if c := a.cred; c != nil && c.Expiry.IsZero() {
		a.mu.Unlock()
		return c, nil // the common case: no expiry, nothing to check
	}
	now := a.now()
	if c := a.cred; c != nil && !c.ExpiredAt(now) {
		if a.flight == nil && a.dueForRefresh(now) && !now.Before(a.retryAt) {
			a.startFlight(nil, true) // refresh ahead; this caller keeps the current credential
		}
		a.mu.Unlock()
		return c, nil
	}
	f, err := a.flightLocked(now, nil)
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return f.wait(ctx)
}

// Refresh runs the plugin again because the server answered 401 to a request made with
// used. Only the first caller for a credential generation runs the plugin; the others get
// its result. Expiry is ignored. If the run fails, the old credential stays cached.
func (a *Authenticator) Refresh(ctx context.Context, used *Credential, rejected *http.Response) (*Credential, error) {
	a.mu.Lock()
	if a.cred != used && a.flight == nil {
		c := a.cred
		a.mu.Unlock()
		return c, nil // already refreshed by someone else
	}
	f, err := a.flightLocked(a.now(), responseInfo(rejected))
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return f.wait(ctx)
}

// flightLocked joins the running plugin run or starts one, unless a backoff holds.
func (a *Authenticator) flightLocked(now time.Time, rejected *Response) (*flight, error) {
	if a.flight != nil {
		return a.flight, nil
	}
	if now.Before(a.retryAt) {
		return nil, fmt.Errorf("%w (not run again for %v after %d failures)", a.lastErr, a.retryAt.Sub(now).Round(time.Millisecond), a.failures)
	}
	return a.startFlight(rejected, false), nil
}

func (a *Authenticator) startFlight(rejected *Response, ahead bool) *flight {
	f := &flight{done: make(chan struct{}), ahead: ahead}
	a.flight = f
	go func() {
		// The run belongs to every waiter, not to the caller who started it, so it gets no
		// caller's context; Host.Timeout bounds it.
		cred, err := a.plugin.Run(context.Background(), rejected)
		a.finish(f, cred, err)
	}()
	return f
}

func (a *Authenticator) finish(f *flight, cred *Credential, err error) {
	a.mu.Lock()
	now := a.now()
	a.flight = nil
	if err != nil {
		a.failures++
		a.lastErr = err
		a.retryAt = now.Add(a.opts.Backoff.after(a.failures))
		f.err = err
		a.mu.Unlock()
		if f.ahead && a.opts.Logger != nil { // the callers of other runs get the error itself
			a.opts.Logger.Warn("exec credential plugin failed", "command", a.plugin.cfg.Command, "error", err)
		}
		close(f.done)
		return
	}
	old := a.cred
	a.cred, a.fetched, a.failures, a.retryAt, a.lastErr = cred, now, 0, time.Time{}, nil
	rotated := old != nil && certChanged(old, cred)
	a.mu.Unlock()
	if a.opts.Metrics != nil {
		a.opts.Metrics.credentialChanged(a, old, cred, rotated, now)
	}
	if rotated {
		a.conns.closeAll() // new connections must present the new certificate
	}
	f.cred = cred
	close(f.done)
}

func (f *flight) wait(ctx context.Context) (*Credential, error) {
	select {
	case <-f.done:
		if f.err != nil {
			return nil, f.err
		}
		return f.cred, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("execcred: waiting for the credential plugin: %w", ctx.Err())
	}
}

// dueForRefresh reports whether the credential is close enough to expiry to refresh ahead.
func (a *Authenticator) dueForRefresh(now time.Time) bool {
	c := a.cred
	if c.Expiry.IsZero() || a.opts.RefreshBefore < 0 {
		return false
	}
	before := a.opts.RefreshBefore
	if before == 0 {
		before = DefaultRefreshBefore
	}
	before = min(before, c.Expiry.Sub(a.fetched)/2)
	return !now.Before(c.Expiry.Add(-before))
}

func (a *Authenticator) now() time.Time {
	if a.opts.Now != nil {
		return a.opts.Now()
	}
	return time.Now()
}

func certChanged(old, cur *Credential) bool {
	if (old.Certificate == nil) != (cur.Certificate == nil) {
		return true
	}
	return old.Certificate != nil && !bytes.Equal(old.Certificate.Certificate[0], cur.Certificate.Certificate[0])
}

func responseInfo(r *http.Response) *Response {
	if r == nil {
		return nil
	}
	return &Response{Header: r.Header.Clone(), Code: int32(r.StatusCode)} //nolint:gosec // HTTP status codes fit
}
