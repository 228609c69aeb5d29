package imagecred

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplug/kplug/imagecred/plugin"
)

// TestCacheRunsItsProviderOncePerEntry: a caller that missed the cache but reached the
// single-flight only after the run that filled it had ended must take the cached answer,
// not run the plugin again.
func TestCacheRunsItsProviderOncePerEntry(t *testing.T) {
	t.Parallel()
	hour := time.Hour
	for round := range 200 {
		var calls atomic.Int32
		p := WithCache(FuncProvider(func(context.Context, *plugin.Request) (*plugin.Response, error) {
			calls.Add(1)
			return &plugin.Response{CacheKeyType: plugin.CacheImage, CacheDuration: &hour, Auth: map[string]plugin.AuthConfig{"registry.io": {Username: "u", Password: "p"}}}, nil
		}), CacheOptions{Provider: "p"})
		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() {
				if _, err := p.Provide(t.Context(), &Request{Image: "registry.io/app"}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("round %d: the provider ran %d times for one cache entry", round, n)
		}
	}
}
