package verifier

import (
	"errors"
	"io"
	"net/http"
	"sync"
)

// errOverBudget refuses to buffer a body that would take the bodies held over the budget.
var errOverBudget = errors.New("verifier: request bodies being checked are over the budget")

// budget counts the bytes of request bodies held in memory across requests.
type budget struct {
	limit int64
	mu    sync.Mutex
	used  int64
}

func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

func (b *budget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
}

// wrap puts r's body under the budget: httpsig asks it (httpsig.BodyReserver) before it
// buffers the body, which it does only for an authenticated request. It returns nil for
// a request without a body.
func (b *budget) wrap(r *http.Request) *budgetedBody {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	body := &budgetedBody{ReadCloser: r.Body, budget: b}
	r.Body = body
	return body
}

// budgetedBody is a request body whose buffering is counted against a budget until the
// handler is done with the request (release), when nothing refers to the bytes any more.
type budgetedBody struct {
	io.ReadCloser
	budget *budget
	held   int64
}

// Reserve implements httpsig.BodyReserver.
func (b *budgetedBody) Reserve(n int64) error {
	if !b.budget.take(n) {
		return errOverBudget
	}
	b.held += n
	return nil
}

func (b *budgetedBody) release() {
	b.budget.give(b.held)
	b.held = 0
}
