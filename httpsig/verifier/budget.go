package verifier

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/kplug/kplug/httpsig"
)

// Refusals to buffer a body that does not fit the budget, as a whole or the signer's share.
var (
	errOverBudget = errors.New("verifier: request bodies being checked are over the budget")
	errOverShare  = errors.New("verifier: request bodies of the signer being checked are over its share of the budget")
)

// budget counts the bytes of request bodies held in memory across requests, and by user:
// one user may hold at most share of limit, so that a signer cannot take the budget from
// every other (a signer's requests replayed by an intermediary count as the signer's).
type budget struct {
	limit, share int64
	mu           sync.Mutex
	used         int64
	byUser       map[string]int64
}

func newBudget(limit int64) *budget {
	// A quarter, but at least one body of kube-apiserver's largest size.
	share := min(max(limit/4, httpsig.MaxBodyBytes+1), limit)
	return &budget{limit: limit, share: share, byUser: map[string]int64{}}
}

// take reserves n bytes for user ("" when not known, which only the whole budget bounds).
func (b *budget) take(user string, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return errOverBudget
	}
	if user != "" {
		if b.byUser[user]+n > b.share {
			return errOverShare
		}
		b.byUser[user] += n
	}
	b.used += n
	return nil
}

func (b *budget) give(user string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if user != "" {
		if b.byUser[user] -= n; b.byUser[user] <= 0 {
			delete(b.byUser, user)
		}
	}
}

// wrap puts r's body under the budget: httpsig asks it (httpsig.BodyReserver) before it
// buffers each chunk of the body, which it does only for an authenticated request. It
// returns nil for a request without a body.
func (b *budget) wrap(r *http.Request) *budgetedBody {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	body := &budgetedBody{ReadCloser: r.Body, budget: b}
	r.Body = body
	return body
}

// budgetedBody is a request body whose buffering is counted against a budget, and the
// signer's share of it, until release: once the request has gone upstream (or failed to),
// or when the handler is done with it.
type budgetedBody struct {
	io.ReadCloser
	budget *budget

	mu       sync.Mutex
	user     string // whose share the body is charged to
	held     int64
	buffered io.Reader // what httpsig buffered, dropped on release
	released bool
}

// chargeTo says whose share the body is buffered on: the user of the signature about to
// be verified. The Authenticator calls it before it lets httpsig verify the signature and
// read the body.
func (b *budgetedBody) chargeTo(user string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.user = user
}

// Reserve implements httpsig.BodyReserver.
func (b *budgetedBody) Reserve(n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.budget.take(b.user, n); err != nil {
		return err
	}
	b.held += n
	return nil
}

// keep records the body httpsig buffered (r.Body once authenticated), to drop on release.
func (b *budgetedBody) keep(r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buffered = r.Body
}

// release gives the bytes back to the budget and drops the buffered body, whose readers
// fail from then on. It is idempotent.
func (b *budgetedBody) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return
	}
	b.released = true
	b.budget.give(b.user, b.held)
	b.held = 0
	if b.buffered != nil {
		httpsig.ReleaseBody(b.buffered)
		b.buffered = nil
	}
}

type budgetedKey struct{}

// withBudgeted carries the request's budgeted body to the forwarding, which releases it.
func withBudgeted(ctx context.Context, b *budgetedBody) context.Context {
	if b == nil {
		return ctx
	}
	return context.WithValue(ctx, budgetedKey{}, b)
}

// releaseBudgeted releases the budgeted body of ctx's request, if any.
func releaseBudgeted(ctx context.Context) {
	if b, _ := ctx.Value(budgetedKey{}).(*budgetedBody); b != nil {
		b.release()
	}
}
