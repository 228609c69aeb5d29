package noncestore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	m := NewMemory(3, clock)
	exp := now.Add(time.Minute)
	for _, tc := range []struct {
		key, nonce string
		want       bool
		reason     string
		full       bool
	}{
		{"k1", "a", true, "", false},
		{"k1", "a", false, "already used", false},
		{"k2", "a", true, "", false}, // another key's nonce is another fact
		{"k1", "b", true, "", false},
		{"k1", "c", false, "", true}, // full: not recorded, nothing forgotten
		{"k1", "a", false, "already used", false},
	} {
		ok, reason, err := m.Consume(t.Context(), tc.key, tc.nonce, exp)
		if ok != tc.want || !strings.Contains(reason, tc.reason) || errors.Is(err, ErrFull) != tc.full {
			t.Errorf("Consume(%s, %s) = %v %q %v, want %v %q (full: %v)", tc.key, tc.nonce, ok, reason, err, tc.want, tc.reason, tc.full)
		}
	}
	// Once they expire, records are swept when room is needed, and a nonce past its
	// expiry is new again (no signature bearing it can be accepted any more).
	now = exp.Add(time.Second)
	if ok, reason, _ := m.Consume(t.Context(), "k1", "c", now.Add(time.Minute)); !ok {
		t.Errorf("after expiry: %q", reason)
	}
	if m.Len() != 1 {
		t.Errorf("Len = %d after the sweep, want 1", m.Len())
	}
}

// TestMemoryConcurrent: of many concurrent consumers of one nonce, exactly one is
// accepted (the atomic check-and-record the protocol requires).
func TestMemoryConcurrent(t *testing.T) {
	t.Parallel()
	m := NewMemory(1000, nil)
	exp := time.Now().Add(time.Minute)
	for i := range 20 {
		var accepted atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if ok, _, _ := m.Consume(t.Context(), "k", fmt.Sprint(i), exp); ok {
					accepted.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := accepted.Load(); n != 1 {
			t.Fatalf("nonce %d accepted %d times", i, n)
		}
	}
}
