package mvproxy

import (
	"context"
	"sync"
	"time"
)

// LocalCache keeps the Directory's local discovery fresh: Run refreshes it periodically,
// Refresh on demand, at most once per MinInterval. It is safe for concurrent use.
type LocalCache struct {
	Directory *Directory
	// Fetch reads the local server's own discovery (see FetchDiscovery).
	Fetch func(context.Context) (*Document, error)
	// Interval between periodic refreshes; MinInterval between refreshes on demand.
	Interval, MinInterval time.Duration
	// OnError, if set, is told about failed refreshes.
	OnError func(error)

	mu       sync.Mutex
	inflight chan struct{}
	last     time.Time
	lastErr  error
}

// Refresh fetches the local discovery unless it was fetched less than MinInterval ago;
// concurrent callers share one fetch.
func (c *LocalCache) Refresh(ctx context.Context) error {
	c.mu.Lock()
	if ch := c.inflight; ch != nil {
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.lastErr
	}
	if !c.last.IsZero() && time.Since(c.last) < c.MinInterval {
		defer c.mu.Unlock()
		return c.lastErr
	}
	ch := make(chan struct{})
	c.inflight = ch
	c.mu.Unlock()

	doc, err := c.Fetch(ctx)
	if err == nil {
		c.Directory.SetLocal(doc)
	} else if c.OnError != nil {
		c.OnError(err)
	}
	c.mu.Lock()
	c.inflight, c.last, c.lastErr = nil, time.Now(), err
	c.mu.Unlock()
	close(ch)
	return err
}

// Run refreshes every Interval until ctx ends; the first refresh is at once, and is
// retried every second until it succeeds.
func (c *LocalCache) Run(ctx context.Context) {
	for c.Directory.Local() == nil {
		if c.forceRefresh(ctx) == nil {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = c.forceRefresh(ctx)
		}
	}
}

func (c *LocalCache) forceRefresh(ctx context.Context) error {
	c.mu.Lock()
	c.last = time.Time{}
	c.mu.Unlock()
	return c.Refresh(ctx)
}
