// Package noncestore records the nonces of accepted KEP-6308 signatures, per key ID, as
// an atomic check-and-record (the resolver protocol's ConsumeNonce): in memory for one
// replica of a resolver, in etcd for several.
package noncestore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Memory is a nonce store in this process's memory, for a resolver with one replica. It
// holds at most Max unexpired records and, when full, refuses rather than forgets: an
// evicted nonce could be replayed, which is what the store is for. One key ID may hold at
// most a quarter of them, so that one signer cannot fill the store for every other (issue
// 31 review, F7). Safe for concurrent
// use; the zero value is not usable, use NewMemory.
type Memory struct {
	max int
	now func() time.Time

	mu      sync.Mutex
	perKey  map[string]map[string]time.Time // key ID -> nonce -> when it may be forgotten
	records int
}

// NewMemory returns a store of at most max records; now is the clock (nil: time.Now).
func NewMemory(max int, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{max: max, now: now, perKey: map[string]map[string]time.Time{}}
}

// ErrFull is wrapped by the error of Consume when the store holds its limit of unexpired
// nonces.
var ErrFull = errors.New("the nonce store is full")

// Consume records nonce for keyID until expires and reports whether it was new; when it
// was not, reason says why (for the verifier's log). A full store fails with ErrFull: the
// nonce could not be recorded, which is an outage the request may pass after (the
// verifier answers 503), not a replay (401, and a client told its signature was used).
func (m *Memory) Consume(_ context.Context, keyID, nonce string, expires time.Time) (accepted bool, reason string, err error) {
	return m.consume(keyID, nonce, expires)
}

func (m *Memory) consume(keyID, nonce string, expires time.Time) (accepted bool, reason string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if seen, ok := m.perKey[keyID][nonce]; ok && !now.After(seen) {
		return false, "the nonce was already used with this key", nil
	}
	bucket := m.perKey[keyID]
	if share := max(m.max/4, 1); len(bucket) >= share {
		m.records -= sweepBucket(bucket, now)
		if len(bucket) >= share {
			return false, "", fmt.Errorf("%w: key ID %s holds its share of %d unexpired nonces (a quarter of the store), and the store refuses rather than forgets one that could then be replayed", ErrFull, quoteKeyID(keyID), share)
		}
	}
	if m.records >= m.max {
		m.sweep(now)
	}
	if m.records >= m.max {
		return false, "", fmt.Errorf("%w: it holds its limit of %d unexpired nonces, and refuses rather than forgets one that could then be replayed", ErrFull, m.max)
	}
	if bucket == nil {
		bucket = map[string]time.Time{}
		m.perKey[keyID] = bucket
	}
	if _, ok := bucket[nonce]; !ok {
		m.records++
	}
	bucket[nonce] = expires
	return true, "", nil
}

// Len is the number of records held, expired ones not yet swept included.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.records
}

// sweep drops the records no signature can be accepted with any more; it runs when the
// store is full, so an idle store does no work.
func (m *Memory) sweep(now time.Time) {
	for keyID, bucket := range m.perKey {
		m.records -= sweepBucket(bucket, now)
		if len(bucket) == 0 {
			delete(m.perKey, keyID)
		}
	}
}

// sweepBucket drops a key ID's expired records and says how many.
func sweepBucket(bucket map[string]time.Time, now time.Time) int {
	n := 0
	for nonce, expires := range bucket {
		if now.After(expires) {
			delete(bucket, nonce)
			n++
		}
	}
	return n
}

// quoteKeyID shows a key ID in an error: quoted, and cut (a client chose it).
func quoteKeyID(keyID string) string {
	if len(keyID) > 64 {
		keyID = keyID[:64] + "..."
	}
	return strconv.Quote(keyID)
}
