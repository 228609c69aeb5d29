//go:build unix

package imagecred

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplug/kplug/imagecred/plugin"
	"github.com/kplug/kplug/internal/testkit/poll"
)

type lookupResult struct {
	creds []Credential
	err   error
}

func lookupAsync(ctx context.Context, k *Keyring, image string) <-chan lookupResult {
	ch := make(chan lookupResult, 1)
	go func() {
		creds, err := k.Lookup(ctx, image, nil)
		ch <- lookupResult{creds, err}
	}()
	return ch
}

// Issue 12 finding 9: one caller that gives up cancels the shared plugin run for all concurrent callers, and the cancellation is cached as a plugin failure.
func TestSecurityCallerGivingUpDoesNotFailTheSharedRun(t *testing.T) {
	f := newFixture(t)
	// cacheDuration 0s: answers are not cached, so every lookup that the failure cache
	// does not answer runs the plugin.
	p := f.provider("p", response("Image", "0s", regAuth))
	f.fake("p").Hold()
	k := f.keyring(Options{FailureCacheTTL: time.Hour}, p)
	// The first caller starts the run and the second joins it; then the first gives up.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// The second starts only once the first's run is under way: had the second started
	// the run, the first's cancellation could not reach it whatever the code did.
	first := lookupAsync(ctx, k, "registry.io/app")
	poll.Until(t, "the first caller's plugin run started", func() bool { return f.fake("p").Runs() == 1 })
	second := lookupAsync(t.Context(), k, "registry.io/app")
	poll.Until(t, "both callers in the run", func() bool { return waiters(t, k, "registry.io/app") == 2 })
	cancel()
	if r := <-first; !errors.Is(r.err, context.Canceled) || len(r.creds) != 0 {
		t.Errorf("the caller that gave up got %v, %v; want context.Canceled", r.creds, r.err)
	}
	f.fake("p").Release()
	if r := <-second; r.err != nil || len(r.creds) != 1 {
		t.Errorf("the caller that waited got %v, %v; want the plugin's credentials", r.creds, r.err)
	}
	// Nobody's cancellation was remembered as the plugin failing: the next lookup runs it.
	if creds, err := k.Lookup(t.Context(), "registry.io/app", nil); err != nil || len(creds) != 1 {
		t.Errorf("a later lookup got %v, %v; want the plugin's credentials", creds, err)
	}
	if n := f.execs("p"); n != 2 {
		t.Errorf("plugin ran %d times, want 2 (one shared run, one later lookup)", n)
	}
}

// Issue 12 finding 9, the failure cache on its own (WithFailureCache is public, and may be
// used without WithCache's flight in front of it): an error that comes with the caller's
// cancellation is the caller's, never remembered as the provider failing.
func TestSecurityFailureCacheForgetsACallersCancellation(t *testing.T) {
	var runs atomic.Int32
	started := make(chan struct{}, 1)
	p := WithFailureCache(FuncProvider(func(ctx context.Context, _ *plugin.Request) (*plugin.Response, error) {
		if runs.Add(1) == 1 {
			started <- struct{}{}
			<-ctx.Done() // the first run lasts until its caller gives up
			return nil, ctx.Err()
		}
		return &plugin.Response{CacheKeyType: plugin.CacheImage, Auth: robot}, nil
	}), FailureCacheOptions{TTL: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := p.Provide(ctx, &Request{Image: "registry.io/app"})
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the caller that gave up got %v, want context.Canceled", err)
	}
	resp, err := p.Provide(t.Context(), &Request{Image: "registry.io/app"})
	if err != nil || resp == nil || len(resp.Auth) != 1 {
		t.Errorf("the next caller got %+v, %v; want the provider's answer, not a remembered failure", resp, err)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("provider ran %d times, want 2", n)
	}
}
