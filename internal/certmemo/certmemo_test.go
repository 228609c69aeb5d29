package certmemo

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestMemoIsBoundedAndForgetsTheLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	m := &Memo[string, int]{Size: 2}
	now := time.Now()
	m.Put("a", 1, now.Add(time.Hour))
	m.Put("b", 2, now.Add(time.Hour))
	if v, ok := m.Get("a", now); !ok || v != 1 { // a is now the most recently used
		t.Fatalf("a: %d %v", v, ok)
	}
	m.Put("c", 3, now.Add(time.Hour))
	if m.Len() != 2 {
		t.Errorf("%d entries, bound 2", m.Len())
	}
	if _, ok := m.Get("b", now); ok {
		t.Error("the least recently used entry stayed")
	}
	if v, ok := m.Get("c", now); !ok || v != 3 {
		t.Errorf("c: %d %v", v, ok)
	}
}

func TestMemoForgetsAtExpiry(t *testing.T) {
	t.Parallel()
	var m Memo[string, bool]
	now := time.Now()
	m.Put("a", true, now.Add(time.Minute))
	if _, ok := m.Get("a", now.Add(time.Minute-time.Nanosecond)); !ok {
		t.Fatal("forgotten before its expiry")
	}
	if _, ok := m.Get("a", now.Add(time.Minute)); ok {
		t.Error("answered at its expiry")
	}
	if m.Len() != 0 {
		t.Errorf("an expired entry stayed after it was looked up: %d entries", m.Len())
	}
}

func TestZeroSizeMeansDefaultSize(t *testing.T) {
	t.Parallel()
	var m Memo[int, struct{}]
	for i := range DefaultSize + 10 {
		m.Put(i, struct{}{}, time.Now().Add(time.Hour))
	}
	if m.Len() != DefaultSize {
		t.Errorf("%d entries, bound %d", m.Len(), DefaultSize)
	}
}

func TestExpiryIsTheFirstCertificateToExpire(t *testing.T) {
	t.Parallel()
	at := func(h int) *x509.Certificate {
		return &x509.Certificate{NotAfter: time.Date(2030, 1, 1, h, 0, 0, 0, time.UTC)}
	}
	for _, chain := range [][]*x509.Certificate{{at(3), at(1), at(2)}, {at(1), at(3)}, {at(2), at(3), at(1)}} {
		if got := Expiry(chain); !got.Equal(at(1).NotAfter) {
			t.Errorf("Expiry = %v, want %v", got, at(1).NotAfter)
		}
	}
}
