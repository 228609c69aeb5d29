package noncestore

import (
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
	}{
		{"k1", "a", true, ""},
		{"k1", "a", false, "already used"},
		{"k2", "a", true, ""}, // another key's nonce is another fact
		{"k1", "b", true, ""},
		{"k1", "c", false, "holds its limit of 3"}, // full: refused, nothing forgotten
		{"k1", "a", false, "already used"},
	} {
		ok, reason, _ := m.Consume(t.Context(), tc.key, tc.nonce, exp)
		if ok != tc.want || !strings.Contains(reason, tc.reason) {
			t.Errorf("Consume(%s, %s) = %v %q, want %v %q", tc.key, tc.nonce, ok, reason, tc.want, tc.reason)
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
