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
	m := NewMemory(8, clock) // a key ID's share: 2
	exp := now.Add(time.Minute)
	for _, tc := range []struct {
		key, nonce string
		want       bool
		reason     string
		full       string
	}{
		{"k1", "a", true, "", ""},
		{"k1", "a", false, "already used", ""},
		{"k2", "a", true, "", ""}, // another key's nonce is another fact
		{"k1", "b", true, "", ""},
		{"k1", "c", false, "", `key ID "k1" holds its share of 2`}, // one signer cannot fill the store
		{"k2", "b", true, "", ""},
		{"k3", "a", true, "", ""},
		{"k3", "b", true, "", ""},
		{"k4", "a", true, "", ""},
		{"k4", "b", true, "", ""},
		{"k5", "a", false, "", "holds its limit of 8"}, // full: not recorded, nothing forgotten
		{"k1", "a", false, "already used", ""},
	} {
		ok, reason, err := m.Consume(t.Context(), tc.key, tc.nonce, exp)
		if ok != tc.want || !strings.Contains(reason, tc.reason) || errors.Is(err, ErrFull) != (tc.full != "") || tc.full != "" && !strings.Contains(err.Error(), tc.full) {
			t.Errorf("Consume(%s, %s) = %v %q %v, want %v %q (full: %q)", tc.key, tc.nonce, ok, reason, err, tc.want, tc.reason, tc.full)
		}
	}
	// Once they expire, records are swept when room is needed, and a nonce past its
	// expiry is new again (no signature bearing it can be accepted any more).
	now = exp.Add(time.Second)
	if ok, reason, _ := m.Consume(t.Context(), "k5", "a", now.Add(time.Minute)); !ok {
		t.Errorf("after expiry: %q", reason)
	}
	if m.Len() != 1 {
		t.Errorf("Len = %d after the sweep, want 1", m.Len())
	}
	if ok, reason, _ := m.Consume(t.Context(), "k1", "a", now.Add(time.Minute)); !ok {
		t.Errorf("after expiry: %q", reason)
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
