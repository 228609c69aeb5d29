package execcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/diskstore"
)

// Listed describes one cache entry without its credential.
type Listed struct {
	ID         string   `json:"id"`
	Command    string   `json:"command,omitempty"`
	Args       []string `json:"args,omitempty"` // with what looks secret redacted (redactArgs)
	APIVersion string   `json:"apiVersion,omitempty"`
	Server     string   `json:"server,omitempty"` // without a password in it
	Credential string   `json:"credential"`       // e.g. "token (1105 bytes)"; never the token
	// Storage is where the answer rests: "file", or the keyring's name.
	Storage    string     `json:"storage,omitempty"`
	Stored     time.Time  `json:"stored,omitzero"`
	Expiration *time.Time `json:"expirationTimestamp,omitempty"`
	ServeUntil time.Time  `json:"serveUntil,omitzero"`
	Servable   bool       `json:"servable"`
	Clients    int        `json:"clients"`
	// Corrupt is set for a file that is not a readable entry; the next run replaces it.
	Corrupt bool `json:"corrupt,omitempty"`

	args    []string    // unredacted, to match --clear
	keyring *keyringRef // to remove the answer with the entry
}

// List describes the entries in dir of command (resolved as Run resolves it), or every
// entry when command is empty, sorted by command, then ID.
func List(dir string, now time.Time, command string) ([]Listed, error) {
	listed, err := list(dir, now)
	if err != nil || command == "" {
		return listed, err
	}
	path, err := execplugin.Resolve(command, "")
	if err != nil {
		return nil, fmt.Errorf("exec-cache: %w", err)
	}
	var out []Listed
	for _, l := range listed {
		if l.Command == path {
			out = append(out, l)
		}
	}
	return out, nil
}

func list(dir string, now time.Time) ([]Listed, error) {
	stored, err := (&diskstore.Store{Dir: dir}).Entries()
	if err != nil {
		return nil, fmt.Errorf("exec-cache: %w", err)
	}
	out := make([]Listed, 0, len(stored))
	for _, s := range stored {
		var e entry
		if json.Unmarshal(s.Data, &e) != nil || e.Schema != entrySchema {
			out = append(out, Listed{ID: s.ID, Credential: "unreadable", Corrupt: true, Stored: s.Modified})
			continue
		}
		l := Listed{
			ID: s.ID, Command: e.Command, Args: redactArgs(e.Args), APIVersion: e.APIVersion, Server: redactURL(e.Server),
			Credential: e.Credential, Storage: StorageFile, Stored: e.Stored, Expiration: e.Expiration,
			ServeUntil: e.ServeUntil, Servable: e.servable(now), Clients: len(e.Clients), args: e.Args,
			keyring: e.Keyring,
		}
		switch f := e.Failure; {
		case f != nil:
			l.Storage = ""
			l.Credential = fmt.Sprintf("none: the plugin failed (exit code %d)", f.Code)
			if f.Cancelled {
				l.Credential = "none: the login was cancelled"
			}
			l.ServeUntil, l.Servable = f.Until, e.failing(now)
		case e.Keyring != nil:
			l.Storage = e.Keyring.Name
		default:
			l.Credential = describe(e.APIVersion, e.Output)
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Listed) int {
		if c := strings.Compare(a.Command, b.Command); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Clear removes the entries of the wrapped command and its arguments (any environment, API
// version or cluster), or every entry, corrupt ones included, when command is empty. The
// command is resolved as Run resolves it; an uninstalled plugin's entries can still be
// removed by its absolute path. It returns how many it removed.
//
// An entry whose answer is in a keyring has its items removed there too (environ locates
// the session bus); when the keyring cannot be reached, the entry file is removed all the
// same, so the answer is never served again, and the error says which items are left.
// Clearing every entry also removes what this directory left in the keyrings it can
// reach and list (the Linux ones) without an entry: the items of a write that crashed.
func Clear(ctx context.Context, dir string, environ []string, command string, args []string) (int, error) {
	var path string
	if command != "" {
		var err error
		if path, err = execplugin.Resolve(command, ""); err != nil && !filepath.IsAbs(command) {
			return 0, fmt.Errorf("exec-cache: %w", err)
		} else if err != nil {
			path = filepath.Clean(command)
		}
	}
	listed, err := list(dir, time.Time{})
	if err != nil {
		return 0, err
	}
	store := &diskstore.Store{Dir: dir}
	v := newVault(StorageKeyring, dir, environ, 0, time.Now)
	defer v.close()
	n := 0
	var errs []error
	for _, l := range listed {
		if path != "" && (l.Command != path || !slices.Equal(l.args, args)) {
			continue
		}
		if err := v.drop(ctx, l.ID, &entry{Keyring: l.keyring}); err != nil {
			errs = append(errs, fmt.Errorf("exec-cache: entry %s: its answer is left in the keyring: %w", l.ID[:12], err))
		}
		if err := store.Remove(l.ID); err != nil {
			return n, fmt.Errorf("exec-cache: %w", errors.Join(append(errs, err)...))
		}
		n++
	}
	if path == "" {
		if err := store.RemoveTemp(0); err != nil { // unfinished writes hold credentials too
			errs = append(errs, fmt.Errorf("exec-cache: %w", err))
		}
		errs = append(errs, v.removeOrphans(ctx))
	}
	return n, errors.Join(errs...)
}

// describe says what kind of credential an answer holds, without any of it.
func describe(apiVersion string, output []byte) string {
	s, err := wire.Parse(apiVersion, output)
	if err != nil {
		return "invalid"
	}
	cert, err := s.Check()
	switch {
	case err != nil:
		return "invalid"
	case s.Token != "" && cert != nil:
		return fmt.Sprintf("token (%d bytes) and client certificate (CN=%s)", len(s.Token), cert.Leaf.Subject.CommonName)
	case cert != nil:
		return fmt.Sprintf("client certificate (CN=%s)", cert.Leaf.Subject.CommonName)
	}
	return fmt.Sprintf("token (%d bytes)", len(s.Token))
}
