//go:build unix

package imagecred

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/poll"
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := lookupAsync(ctx, k, "registry.io/app")
	second := lookupAsync(context.Background(), k, "registry.io/app")
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
	if creds, err := k.Lookup(context.Background(), "registry.io/app", nil); err != nil || len(creds) != 1 {
		t.Errorf("a later lookup got %v, %v; want the plugin's credentials", creds, err)
	}
	if n := f.execs("p"); n != 2 {
		t.Errorf("plugin ran %d times, want 2 (one shared run, one later lookup)", n)
	}
}
