// Package certmemo remembers what verifying a client certificate concluded, until the
// verified chain expires, so that a client's certificate is verified once rather than
// on each of its requests. It serves the mixed version proxy's client identities and
// the HTTP message signature verifier's certificate users.
package certmemo

import (
	"container/list"
	"crypto/x509"
	"sync"
	"time"
)

// DefaultSize is the entries a Memo keeps when its Size is zero.
const DefaultSize = 4096

// Memo remembers a value per key until the time it was given with, at most Size entries
// (DefaultSize if zero), the least recently used going first. Refusals should not be
// put in it: a certificate that failed is verified again, each time. The zero value is
// ready to use; a Memo must not be copied once used. It is safe for concurrent use.
type Memo[K comparable, V any] struct {
	Size int

	mu      sync.Mutex
	order   *list.List // of *entry[K, V], most recently used first
	entries map[K]*list.Element
}

type entry[K comparable, V any] struct {
	key     K
	value   V
	expires time.Time
}

// Get returns the value remembered for key, unless it has expired at now.
func (m *Memo[K, V]) Get(key K, now time.Time) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.entries[key]
	if !ok {
		var zero V
		return zero, false
	}
	e := el.Value.(*entry[K, V])
	if !now.Before(e.expires) {
		m.order.Remove(el)
		delete(m.entries, key)
		var zero V
		return zero, false
	}
	m.order.MoveToFront(el)
	return e.value, true
}

// Put remembers value for key until expires.
func (m *Memo[K, V]) Put(key K, value V, expires time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries == nil {
		m.order, m.entries = list.New(), map[K]*list.Element{}
	}
	if el, ok := m.entries[key]; ok {
		m.order.Remove(el)
	}
	m.entries[key] = m.order.PushFront(&entry[K, V]{key: key, value: value, expires: expires})
	size := m.Size
	if size <= 0 {
		size = DefaultSize
	}
	for m.order.Len() > size {
		last := m.order.Back()
		m.order.Remove(last)
		delete(m.entries, last.Value.(*entry[K, V]).key)
	}
}

// Len is the number of entries remembered, expired ones included until they are looked up
// or pushed out.
func (m *Memo[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// Expiry is when the first certificate of a verified chain expires: what was concluded
// from the chain holds no longer.
func Expiry(chain []*x509.Certificate) time.Time {
	var first time.Time
	for i, c := range chain {
		if i == 0 || c.NotAfter.Before(first) {
			first = c.NotAfter
		}
	}
	return first
}
