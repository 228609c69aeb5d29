package oskeyring

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
)

// memKeyring is a keyring in memory with a small item limit, and a Set that fails on
// demand, for the blob's own logic; the real keyrings are tested in keyring_linux_test.go.
type memKeyring struct {
	limit   int
	items   map[string][]byte
	failSet int // the failSet-th Set (1-based) fails; 0: none
	sets    int
}

func newMem(limit int) *memKeyring { return &memKeyring{limit: limit, items: map[string][]byte{}} }

func (m *memKeyring) Name() string   { return "memory" }
func (m *memKeyring) ItemLimit() int { return m.limit }
func (m *memKeyring) Close() error   { return nil }
func (m *memKeyring) Set(_ context.Context, it Item) error {
	m.sets++
	if m.sets == m.failSet {
		return errors.New("injected failure")
	}
	if len(it.Secret) > m.limit {
		return fmt.Errorf("item of %d bytes over the limit %d", len(it.Secret), m.limit)
	}
	m.items[it.Account] = bytes.Clone(it.Secret)
	return nil
}
func (m *memKeyring) Get(_ context.Context, account string) ([]byte, error) {
	b, ok := m.items[account]
	if !ok {
		return nil, ErrNotFound
	}
	return bytes.Clone(b), nil
}
func (m *memKeyring) Delete(_ context.Context, account string) error {
	delete(m.items, account)
	return nil
}
func (m *memKeyring) Accounts(context.Context) ([]string, error) {
	return slices.Sorted(maps.Keys(m.items)), nil
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func TestBlobRoundTripAcrossItems(t *testing.T) {
	ctx := t.Context()
	for _, size := range []int{0, 1, 150, 5000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			k := newMem(300)
			data := random(size) // incompressible: the worst case
			ref, err := Put(ctx, k, "a", "label", data, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := max(1, (size+400)/(300-headerMax)); ref.Parts > want {
				t.Errorf("%d parts for %d bytes, want at most %d", ref.Parts, size, want)
			}
			for a, item := range k.items {
				if len(item) > 300 {
					t.Errorf("item %s holds %d bytes, over the keyring's 300", a, len(item))
				}
			}
			got, err := Fetch(ctx, k, "a", ref)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Fetch = %d bytes, %v; want the %d bytes stored", len(got), err, size)
			}
			if err := Remove(ctx, k, "a", ref.Parts); err != nil || len(k.items) != 0 {
				t.Fatalf("Remove: %v, left %v", err, slices.Collect(maps.Keys(k.items)))
			}
		})
	}
}

// A blob is whole or missing: never items of two writes, never a part short.
func TestBlobMixedOrMissingPartsAreMissing(t *testing.T) {
	ctx := t.Context()
	k := newMem(300)
	first, err := Put(ctx, k, "a", "", random(1000), 0)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.Clone(k.items["a/1"])
	second, err := Put(ctx, k, "a", "", random(1000), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Fetch(ctx, k, "a", first); !errors.Is(err, ErrNotFound) {
		t.Errorf("Fetch of an overwritten write: %v, want ErrNotFound", err)
	}
	k.items["a/1"] = old // one part of the first write among the second's
	if _, err := Fetch(ctx, k, "a", second); !errors.Is(err, ErrNotFound) {
		t.Errorf("Fetch with a part of another write: %v, want ErrNotFound", err)
	}
	third, err := Put(ctx, k, "a", "", random(1000), 0)
	if err != nil {
		t.Fatal(err)
	}
	delete(k.items, "a/2")
	if _, err := Fetch(ctx, k, "a", third); !errors.Is(err, ErrNotFound) {
		t.Errorf("Fetch with a part missing: %v, want ErrNotFound", err)
	}
	fourth, err := Put(ctx, k, "a", "", random(1000), 0)
	if err != nil {
		t.Fatal(err)
	}
	k.items["a/1"][len(k.items["a/1"])-1] ^= 1
	if _, err := Fetch(ctx, k, "a", fourth); !errors.Is(err, ErrNotFound) {
		t.Errorf("Fetch of a corrupted part: %v, want ErrNotFound", err)
	}
}

// A blob that does not fit, or a keyring that fails midway, leaves nothing behind.
func TestBlobFailureLeavesNothing(t *testing.T) {
	ctx := t.Context()
	k := newMem(300)
	_, err := Put(ctx, k, "a", "", random(MaxParts*300), 0)
	if !errors.Is(err, ErrTooBig) {
		t.Errorf("Put of %d incompressible bytes: %v, want ErrTooBig", MaxParts*300, err)
	}
	k.failSet = 3
	if _, err := Put(ctx, k, "a", "", random(1000), 0); err == nil {
		t.Error("Put with a failing third item succeeded")
	}
	if len(k.items) != 0 {
		t.Errorf("left %v after failures, want nothing", slices.Collect(maps.Keys(k.items)))
	}
}

// Text compresses: a typical answer takes fewer items than its size suggests.
func TestBlobCompresses(t *testing.T) {
	k := newMem(2560)
	data := bytes.Repeat([]byte(`{"kind":"ExecCredential","status":{"token":"abc"}}`), 200) // 10 KB
	ref, err := Put(t.Context(), k, "a", "", data, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Parts != 1 {
		t.Errorf("%d bytes of repetitive JSON took %d items of 2560 bytes, want 1", len(data), ref.Parts)
	}
}

func TestRemoveAll(t *testing.T) {
	ctx := t.Context()
	k := newMem(300)
	for _, a := range []string{"s1/x/0", "s1/y/0", "s2/x/0"} {
		k.items[a] = []byte("v")
	}
	n, err := RemoveAll(ctx, k, "s1/")
	if err != nil || n != 2 {
		t.Fatalf("RemoveAll = %d, %v; want 2", n, err)
	}
	if got := slices.Sorted(maps.Keys(k.items)); !slices.Equal(got, []string{"s2/x/0"}) {
		t.Errorf("left %v, want [s2/x/0]", got)
	}
}
