// Package flight shares one run of a function among the concurrent callers that ask for
// the same key: the single-flight of every kplug cache (exec credentials, image
// credentials), with one cancellation policy.
//
// The policy:
//
//   - The run belongs to no caller. It gets the first caller's context values but not its
//     cancellation or deadline; what bounds it is the function's own timeout (a plugin's
//     timeout). So a caller that gives up neither stops the run for the others nor turns
//     it into a failure that would be reported to them or remembered.
//   - Each caller waits until the run ends or its own context ends, whichever is first.
//     In the second case it gets its context's error, which is its own: Do's callers tell
//     it apart with ctx.Err() != nil and never record it as the run's result.
//
// A cache in front of a Group must look again inside fn: a caller that missed the cache
// may reach Do only after the run that filled it has ended, and would otherwise start a
// second run.
package flight

import (
	"context"
	"sync"
)

// Group shares runs by key. The zero value is ready to use; a Group is safe for concurrent
// use and must not be copied after first use.
type Group[V any] struct {
	mu    sync.Mutex
	calls map[string]*call[V]
}

type call[V any] struct {
	done    chan struct{}
	val     V
	err     error
	waiters int // callers in Do, guarded by Group.mu
}

// Do runs fn for key, or joins the run in progress for key, under the package's policy.
func (g *Group[V]) Do(ctx context.Context, key string, fn func(context.Context) (V, error)) (V, error) {
	c := g.start(ctx, key, fn)
	defer func() {
		g.mu.Lock()
		c.waiters--
		g.mu.Unlock()
	}()
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// Waiters is how many callers are waiting for the run in progress for key.
func (g *Group[V]) Waiters(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		return c.waiters
	}
	return 0
}

// Forget makes the next Do for key start a new run even if one is in progress, whose
// callers still get its result (a credential the server has just rejected, say).
func (g *Group[V]) Forget(key string) {
	g.mu.Lock()
	delete(g.calls, key)
	g.mu.Unlock()
}

func (g *Group[V]) start(ctx context.Context, key string, fn func(context.Context) (V, error)) *call[V] {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		c.waiters++
		return c
	}
	if g.calls == nil {
		g.calls = map[string]*call[V]{}
	}
	c := &call[V]{done: make(chan struct{}), waiters: 1}
	g.calls[key] = c
	detached := context.WithoutCancel(ctx)
	go func() {
		c.val, c.err = fn(detached)
		g.mu.Lock()
		if g.calls[key] == c {
			delete(g.calls, key)
		}
		g.mu.Unlock()
		close(c.done)
	}()
	return c
}
