package execcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/kplug/kplug/internal/diskstore"
	"github.com/kplug/kplug/internal/oskeyring"
)

// Where answers rest (Options.Storage).
const (
	// StorageFile keeps each answer in its entry file, 0600 in the private cache
	// directory: what exec-cache always did, and the default.
	StorageFile = "file"
	// StorageKeyring keeps answers in the OS keyring (oskeyring.Auto): the Keychain,
	// the Credential Manager, or on Linux the Secret Service when the session bus has
	// one, else the kernel's user keyring. The entry file keeps the rest (command,
	// expiry, clients) and the lock; no credential is written to disk.
	StorageKeyring = oskeyring.Auto
	// StorageSecretService and StorageKernelKeyring are the Linux keyrings by name, for
	// those who want one and never the other.
	StorageSecretService = oskeyring.SecretService
	StorageKernelKeyring = oskeyring.Kernel
	// StorageNone caches nothing: the plugin runs on every call, as without exec-cache.
	StorageNone = "none"
)

// Storages lists the valid Options.Storage values.
var Storages = []string{StorageFile, StorageKeyring, StorageSecretService, StorageKernelKeyring, StorageNone}

// keyringService names exec-cache's items in every keyring.
const keyringService = "kplug-exec-cache"

// keyringRef is where an entry's answer rests when it is in a keyring: which keyring,
// and which write of the items there (oskeyring.Ref), so that items of another write are
// never served for this entry.
type keyringRef struct {
	Name string `json:"name"`
	oskeyring.Ref
}

// vault keeps the answers of one cache directory where Options.Storage says; the entry
// files keep everything else. It opens keyrings when first needed, and keeps them open
// for the rest of the call.
type vault struct {
	storage string
	scope   string // names this cache directory's items within the keyring
	cfg     oskeyring.Config
	now     func() time.Time
	open    map[string]oskeyring.Keyring // by keyring name, and by storage for the writer
}

func newVault(storage, dir string, environ []string, timeout time.Duration, now func() time.Time) *vault {
	if storage == "" {
		storage = StorageFile
	}
	return &vault{storage: storage, scope: keyringScope(dir), now: now, open: map[string]oskeyring.Keyring{},
		cfg: oskeyring.Config{Service: keyringService, Environ: environ, Timeout: timeout}}
}

// keyringScope keeps apart the items of two cache directories (--cache-dir) of one user.
func keyringScope(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	sum := sha256.Sum256([]byte(filepath.Clean(dir)))
	return hex.EncodeToString(sum[:6])
}

func (v *vault) account(id string) string { return v.scope + "/" + id }

// keyring opens the keyring called name (a storage, or the name an entry records).
func (v *vault) keyring(ctx context.Context, name string) (oskeyring.Keyring, error) {
	if k, ok := v.open[name]; ok {
		return k, nil
	}
	for _, k := range v.open {
		if k.Name() == name {
			return k, nil
		}
	}
	k, err := oskeyring.Open(ctx, name, v.cfg)
	if err != nil {
		return nil, err
	}
	v.open[name] = k
	return k, nil
}

func (v *vault) close() {
	for _, k := range v.open {
		_ = k.Close()
	}
}

// mismatch says why an entry is not where this call keeps answers, or "" if it is: a
// file entry is not served from the keyring storage (the next store replaces it, which
// removes the plaintext copy), a keyring entry not from the file storage, and an entry in
// one Linux keyring not when the other is asked for by name.
func (v *vault) mismatch(e *entry) string {
	switch {
	case e.Keyring == nil && v.storage != StorageFile:
		return "the answer is in a file, and --storage is " + v.storage
	case e.Keyring != nil && v.storage == StorageFile:
		return "the answer is in the " + e.Keyring.Name + " keyring, and --storage is file"
	case e.Keyring != nil && v.storage != StorageKeyring && e.Keyring.Name != v.storage:
		return "the answer is in the " + e.Keyring.Name + " keyring, and --storage is " + v.storage
	}
	return ""
}

// get returns e's answer.
func (v *vault) get(ctx context.Context, id string, e *entry) ([]byte, error) {
	if e.Keyring == nil {
		return e.Output, nil
	}
	k, err := v.keyring(ctx, e.Keyring.Name)
	if err != nil {
		return nil, err
	}
	return oskeyring.Fetch(ctx, k, v.account(id), e.Keyring.Ref)
}

// put stores out as e's answer: in e itself for the file storage, else in the keyring,
// recording where in e. It fails, storing nothing, when the keyring is unreachable or
// out is too big for it.
func (v *vault) put(ctx context.Context, id string, e *entry, out []byte) error {
	if v.storage == StorageFile {
		e.Output = out
		return nil
	}
	k, err := v.keyring(ctx, v.storage)
	if err != nil {
		return err
	}
	// The keyring may drop the items itself a little after they stop being served (the
	// kernel keyring does), so a forgotten entry does not keep a credential alive.
	ttl := e.ServeUntil.Sub(v.now()) + time.Minute
	label := fmt.Sprintf("kplug exec-cache: %s (entry %s)", filepath.Base(e.Command), id[:12])
	ref, err := oskeyring.Put(ctx, k, v.account(id), label, out, ttl)
	if err != nil {
		return err
	}
	e.Keyring = &keyringRef{Name: k.Name(), Ref: ref}
	e.Credential = describe(e.APIVersion, out)
	return nil
}

// drop removes e's keyring items, if any.
func (v *vault) drop(ctx context.Context, id string, e *entry) error {
	if e.Keyring == nil {
		return nil
	}
	k, err := v.keyring(ctx, e.Keyring.Name)
	if err != nil {
		return err
	}
	return oskeyring.Remove(ctx, k, v.account(id), e.Keyring.Parts)
}

// forget removes the locked entry: its keyring items, then its file. Items that cannot
// be removed (the keyring is unreachable from here) are logged and left: they are never
// served without the file, and the kernel keyring drops them when they expire.
func (v *vault) forget(ctx context.Context, id string, locked *diskstore.Locked, log *slog.Logger) error {
	var e entry
	if err := locked.Load(&e); err == nil {
		if err := v.drop(ctx, id, &e); err != nil {
			log.Warn("exec-cache: cannot remove the entry's answer from the keyring", "err", err)
		}
	}
	return locked.Delete()
}

// removeOrphans removes the directory's items from the keyrings that can list them and
// that this system has (the kernel keyring; the Secret Service when the session bus has
// one): what a crash between writing the items and the entry file left.
func (v *vault) removeOrphans(ctx context.Context) error {
	var errs []error
	for _, name := range []string{oskeyring.Kernel, oskeyring.SecretService} {
		k, err := v.keyring(ctx, name)
		if err != nil {
			continue // not on this system, or not reachable from this session
		}
		if _, err := oskeyring.RemoveAll(ctx, k, v.scope+"/"); err != nil {
			errs = append(errs, fmt.Errorf("exec-cache: removing items left in the %s keyring: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
