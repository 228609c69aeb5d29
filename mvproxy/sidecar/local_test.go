package sidecar

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// Issue 13: LocalDiscovery ran its shared fetch with the first caller's context, so a client
// that gave up cancelled the refresh the others waited for, and the cancellation was
// remembered as the refresh's failure for MinInterval.
func TestLocalCacheCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := mvproxy.NewDirectory("self")
		release := make(chan struct{})
		fetches := 0
		c := &LocalDiscovery{
			Directory: dir, Interval: time.Hour, MinInterval: time.Minute,
			Fetch: func(ctx context.Context) (*discovery.Document, error) {
				fetches++
				select {
				case <-release:
					return discoverytest.Document("batch/v1/jobs"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			},
		}
		first, giveUp := context.WithCancel(context.Background())
		firstErr, secondErr := make(chan error, 1), make(chan error, 1)
		go func() { firstErr <- c.Refresh(first) }()
		synctest.Wait()
		go func() { secondErr <- c.Refresh(context.Background()) }()
		synctest.Wait()

		giveUp()
		if err := <-firstErr; !errors.Is(err, context.Canceled) {
			t.Errorf("the caller that gave up: %v, want its own context's error", err)
		}
		close(release)
		if err := <-secondErr; err != nil {
			t.Errorf("the caller that waited: %v", err)
		}
		if err := c.Refresh(context.Background()); err != nil || fetches != 1 || !dir.Local().Serves(discovery.GVR{Group: "batch", Version: "v1", Resource: "jobs"}) {
			t.Errorf("within MinInterval: %v after %d fetches, local discovery %v", err, fetches, dir.Local())
		}
	})
}

// A fetch that hangs is bounded by Timeout, not by a caller.
func TestLocalCacheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &LocalDiscovery{
			Directory: mvproxy.NewDirectory("self"), Interval: time.Hour, MinInterval: time.Minute, Timeout: 5 * time.Second,
			Fetch: func(ctx context.Context) (*discovery.Document, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
		}
		start := time.Now()
		if err := c.Refresh(context.Background()); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 5*time.Second {
			t.Errorf("hanging fetch: %v after %v", err, time.Since(start))
		}
	})
}
