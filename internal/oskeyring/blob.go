package oskeyring

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// A blob is stored compressed (DEFLATE), split into numbered items named "ACCOUNT/0",
// "ACCOUNT/1", ... Each item starts with a header line,
//
//	kplug-blob/1 GEN I/N SUM
//
// GEN is random per Put, SUM the start of the SHA-256 of the compressed blob. Fetch reads
// items 0..N-1 and accepts them only if every header names the GEN and N it expects and the
// sum matches: an item left from another write, a missing one or a corrupted one make the
// blob missing, so a half-written blob is never read as a whole one.
const (
	blobMagic = "kplug-blob/1"
	// headerMax bounds a header: magic, 32 hex digits of GEN, I/N, 32 of SUM, spaces, newline.
	headerMax = len(blobMagic) + 1 + 32 + 1 + 5 + 1 + 32 + 1
	// MaxParts bounds the items of one blob: a blob that needs more is ErrTooBig.
	MaxParts = 32
	// maxInflated bounds a blob once decompressed (a plugin's output is capped at 4 MiB).
	maxInflated = 8 << 20
)

// Ref says which write of a blob an index expects; Fetch reads only that one.
type Ref struct {
	Gen   string `json:"gen"`
	Parts int    `json:"parts"`
}

// Put stores data under account, compressed and split into as many items as k needs
// (ItemLimit), each with label and ttl. On failure nothing it wrote is left, and an error
// wrapping ErrTooBig says the blob does not fit.
func Put(ctx context.Context, k Keyring, account, label string, data []byte, ttl time.Duration) (Ref, error) {
	var z bytes.Buffer
	w, err := flate.NewWriter(&z, flate.BestCompression)
	if err != nil {
		return Ref{}, err
	}
	if _, err := w.Write(data); err != nil {
		return Ref{}, err
	}
	if err := w.Close(); err != nil {
		return Ref{}, err
	}
	chunk := k.ItemLimit() - headerMax
	n := (z.Len() + chunk - 1) / chunk
	if n > MaxParts {
		return Ref{}, &Error{Keyring: k.Name(), Op: "storing " + account,
			Err: fmt.Errorf("%w: %d bytes, %d compressed; at most %d items of %d bytes", ErrTooBig, len(data), z.Len(), MaxParts, chunk)}
	}
	gen := make([]byte, 16)
	if _, err := rand.Read(gen); err != nil {
		return Ref{}, err
	}
	ref := Ref{Gen: hex.EncodeToString(gen), Parts: n}
	sum := sha256.Sum256(z.Bytes())
	sumHex := hex.EncodeToString(sum[:16])
	for i := range n {
		part := z.Bytes()[i*chunk : min((i+1)*chunk, z.Len())]
		secret := fmt.Appendf(nil, "%s %s %d/%d %s\n", blobMagic, ref.Gen, i, n, sumHex)
		secret = append(secret, part...)
		it := Item{Account: partName(account, i), Label: partLabel(label, i, n), Secret: secret, TTL: ttl}
		if err := k.Set(ctx, it); err != nil {
			// What was written is removed, so no part of this write can be read.
			return Ref{}, errors.Join(err, Remove(ctx, k, account, i+1))
		}
	}
	return ref, nil
}

// Fetch reads the blob ref names from account. It returns an error wrapping ErrNotFound
// when any item is missing or belongs to another write, so the caller treats it as a
// miss.
func Fetch(ctx context.Context, k Keyring, account string, ref Ref) ([]byte, error) {
	if ref.Parts < 1 || ref.Parts > MaxParts {
		return nil, fmt.Errorf("%w: invalid part count %d", ErrNotFound, ref.Parts)
	}
	var z bytes.Buffer
	var sum string
	for i := range ref.Parts {
		secret, err := k.Get(ctx, partName(account, i))
		if err != nil {
			return nil, err
		}
		header, part, ok := bytes.Cut(secret, []byte("\n"))
		if !ok {
			return nil, fmt.Errorf("%w: item %d has no header", ErrNotFound, i)
		}
		f := strings.Fields(string(header))
		if len(f) != 4 || f[0] != blobMagic || f[1] != ref.Gen || f[2] != strconv.Itoa(i)+"/"+strconv.Itoa(ref.Parts) || (i > 0 && f[3] != sum) {
			return nil, fmt.Errorf("%w: item %d is of another write", ErrNotFound, i)
		}
		sum = f[3]
		z.Write(part)
	}
	got := sha256.Sum256(z.Bytes())
	if hex.EncodeToString(got[:16]) != sum {
		return nil, fmt.Errorf("%w: the items do not add up to the blob written", ErrNotFound)
	}
	r := flate.NewReader(&z)
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, maxInflated+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if len(data) > maxInflated {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrNotFound, maxInflated)
	}
	return data, nil
}

// Remove deletes the first parts items of account's blob.
func Remove(ctx context.Context, k Keyring, account string, parts int) error {
	var errs []error
	for i := range min(parts, MaxParts) {
		errs = append(errs, k.Delete(ctx, partName(account, i)))
	}
	return errors.Join(errs...)
}

// RemoveAll deletes every item of the service whose account starts with prefix, where
// the keyring can list them (Lister); others are left. It returns how many it removed.
func RemoveAll(ctx context.Context, k Keyring, prefix string) (int, error) {
	l, ok := k.(Lister)
	if !ok {
		return 0, nil
	}
	accounts, err := l.Accounts(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, a := range accounts {
		if strings.HasPrefix(a, prefix) {
			if err := k.Delete(ctx, a); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

func partName(account string, i int) string { return account + "/" + strconv.Itoa(i) }

func partLabel(label string, i, n int) string {
	if n == 1 {
		return label
	}
	return fmt.Sprintf("%s (part %d of %d)", label, i+1, n)
}
