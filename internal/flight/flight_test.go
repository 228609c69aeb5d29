package flight

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestSharedRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group[int]
		var runs atomic.Int32
		release := make(chan struct{})
		fn := func(ctx context.Context) (int, error) {
			runs.Add(1)
			<-release
			return 42, ctx.Err()
		}
		results := make(chan int, 3)
		for range 3 {
			go func() {
				v, err := g.Do(t.Context(), "k", fn)
				if err != nil {
					t.Error(err)
				}
				results <- v
			}()
		}
		synctest.Wait()
		if n := g.Waiters("k"); n != 3 {
			t.Errorf("Waiters = %d, want 3", n)
		}
		close(release)
		for range 3 {
			if v := <-results; v != 42 {
				t.Errorf("got %d, want 42", v)
			}
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("fn ran %d times, want 1", n)
		}
	})
}

// A caller that gives up gets its own context's error at once; the run goes on, with a
// context that was not cancelled, for the caller that waits.
func TestCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group[string]
		release := make(chan struct{})
		fn := func(ctx context.Context) (string, error) {
			<-release
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "done", nil
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		first := make(chan error, 1)
		go func() { _, err := g.Do(ctx, "k", fn); first <- err }()
		synctest.Wait() // the first caller started the run
		second := make(chan string, 1)
		go func() { v, _ := g.Do(t.Context(), "k", fn); second <- v }()
		synctest.Wait()
		if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the caller whose deadline passed got %v", err)
		}
		close(release)
		if v := <-second; v != "done" {
			t.Errorf("the caller that waited got %q, want done", v)
		}
	})
}

func TestForget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group[int]
		var runs atomic.Int32
		release := make(chan struct{})
		fn := func(context.Context) (int, error) { n := runs.Add(1); <-release; return int(n), nil }
		got := make(chan int, 2)
		go func() { v, _ := g.Do(t.Context(), "k", fn); got <- v }()
		synctest.Wait()
		g.Forget("k")
		go func() { v, _ := g.Do(t.Context(), "k", fn); got <- v }()
		synctest.Wait()
		close(release)
		if a, b := <-got, <-got; a+b != 3 {
			t.Errorf("got %d and %d, want runs 1 and 2", a, b)
		}
	})
}
