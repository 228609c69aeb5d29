package execcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/diskstore"
	"github.com/kplug/kplug/internal/oskeyring"
)

// Defaults for zero Options fields.
const (
	DefaultSkew          = time.Minute
	DefaultLockTimeout   = 5 * time.Minute
	DefaultFailureWindow = 30 * time.Second
)

// waitPoll is how often a caller waiting for a login looks at the cache.
const waitPoll = 500 * time.Millisecond

// Options configures one run of the wrapper. The CLI fills it from flags and the process;
// nothing here reads the environment or the clock by itself.
type Options struct {
	// Command and Args are the wrapped plugin, as configured.
	Command string
	Args    []string
	// Dir is the cache directory; required.
	Dir string
	// Skew: an answer is served until this long before its expirationTimestamp (at most
	// half its remaining lifetime). Zero means DefaultSkew; negative means none.
	Skew time.Duration
	// DefaultTTL is how long an answer without expirationTimestamp is served; zero means
	// such answers are not cached.
	DefaultTTL time.Duration
	// LockTimeout bounds the wait for another process running the wrapped plugin for the
	// same key. Zero means DefaultLockTimeout.
	LockTimeout time.Duration
	// Timeout bounds a non-interactive run of the wrapped plugin; zero means none.
	// Interactive runs (a login at the terminal) are never timed out.
	Timeout time.Duration
	// Storage is where answers rest: StorageFile (the zero value too), a keyring
	// (StorageKeyring, or one of Linux's by name), or StorageNone (the plugin runs on
	// every call). The entry files, and their locks, stay in Dir whatever it is.
	Storage string
	// KeyringTimeout bounds each call to a keyring; zero means oskeyring.DefaultTimeout.
	KeyringTimeout time.Duration
	// Failures is how long a failed or cancelled run of the wrapped plugin is the answer
	// for its entry, so that a failed login does not make every other caller prompt or
	// open a browser again. Zero means DefaultFailureWindow; negative means none.
	Failures time.Duration
	// WaitLogin is how long a caller without a terminal whose plugin fails waits for an
	// answer from a login in a terminal to be stored; zero means it fails at once.
	WaitLogin time.Duration
	// KeyEnv chooses the environment variables in the cache key.
	KeyEnv KeyEnv
	// Environ is the wrapper's environment, KUBERNETES_EXEC_INFO included; the wrapped
	// plugin gets it unchanged.
	Environ []string
	// Stdin is the terminal, handed to the wrapped plugin when the client says the run is
	// interactive; nil means the null device.
	Stdin *os.File
	// Stdout receives the answer; Stderr the wrapped plugin's stderr, as it writes it.
	Stdout io.Writer
	Stderr io.Writer
	// Client is the calling process, ClientOf(os.Getppid()).
	Client Client
	// Caller is how the client started, CallerOf(os.Getppid()). The wrapped command is
	// found as the client finds an exec block's command: a bare name in the Caller's PATH
	// (never in one the exec block set), a relative path from the working directory, which
	// the client shares. When the Caller is unknown and a policy restricts plugins, bare
	// names are not resolved at all (an absolute path still is): nothing exec-cache can see
	// would tell it which file the client means.
	Caller Caller
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log gets debug detail (hits, misses, refreshes) and warnings; nil discards them.
	Log *slog.Logger
	// RefreshAfter, when positive, is how old a stored answer must be before a client's
	// refresh (a second call, or a v1alpha1 spec.response) runs the plugin again; a refresh
	// sooner is served the stored answer. The agent sets it for remotes, which can claim
	// to be any client and would otherwise make this machine run a plugin (and maybe open
	// a login) on every call.
	RefreshAfter time.Duration
	// Policies are the credential plugin policies (kuberc) the wrapped command must pass,
	// all of them, so that exec-cache does not launder the client's policy. None allows
	// every plugin.
	Policies []FilePolicy
}

// InfoError says KUBERNETES_EXEC_INFO could not be understood.
type InfoError struct{ Err error }

func (e *InfoError) Error() string {
	return "exec-cache: " + strings.TrimPrefix(e.Err.Error(), "plugin: ")
}
func (e *InfoError) Unwrap() error { return e.Err }

// Run answers like the wrapped plugin: from the cache when it holds a servable answer for
// this key and the client is not refreshing, otherwise by running the wrapped plugin, whose
// stdout is printed unchanged and, if it is a valid ExecCredential, stored.
//
// When the wrapped plugin fails, its stdout is printed as it was and Run returns its
// *execplugin.ExitError (the caller exits with its code; the plugin's stderr has already
// passed through). No failed output is stored; the failure itself is the entry's answer
// for the failure window (a *RecentFailureError), and a rejected entry is removed before
// the wrapped plugin runs, so it is not served again whatever happens next. A caller
// without a terminal whose plugin fails is told what to run in one, and with WaitLogin
// waits for that login.
//
// Run is the same pipeline as a client's, on the plugin side of the wire, where an answer
// is bytes to pass on unchanged: configuration (Options and KUBERNETES_EXEC_INFO) -> source
// (wrapped: the plugin run as the client would run it) -> decorator (diskCache: the entry
// of this key, locked across processes) -> output (stdout).
func Run(ctx context.Context, o Options) error {
	if !slices.Contains(Storages, o.Storage) && o.Storage != "" {
		return fmt.Errorf("exec-cache: unknown storage %q", o.Storage)
	}
	if o.Dir == "" && o.Storage != StorageNone {
		return errors.New("exec-cache: no cache directory")
	}
	path, err := o.wrappedPath()
	if err != nil {
		return err
	}
	info, err := execInfo(o.Environ)
	if err != nil {
		return err
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	source := &wrapped{o: &o, path: path, interactive: o.Stdin != nil}
	var src answerer = source
	switch {
	case o.Storage == StorageNone:
		log.Debug("exec-cache: --storage none: running the plugin without the cache")
		if info != nil {
			source.interactive = info.Interactive
		}
	case info == nil:
		log.Warn("exec-cache: " + wire.InfoEnv + " is not set, so no client ran this; running the plugin without the cache")
	case info.Uncached() != "":
		log.Debug("exec-cache: " + info.Uncached() + "; running the plugin without the cache")
		source.interactive = info.Interactive
	default:
		source.interactive = info.Interactive
		src = &diskCache{o: &o, next: source, path: path, info: info, log: log, interactive: source.runsInteractive(),
			key: Key(path, o.Args, o.Environ, info, o.KeyEnv)}
	}
	out, err := src.answer(ctx)
	var exitErr *execplugin.ExitError
	var recent *RecentFailureError
	if dc, ok := src.(*diskCache); ok && !dc.interactive && ctx.Err() == nil && (errors.As(err, &exitErr) || errors.As(err, &recent)) {
		out, err = dc.afterFailure(ctx, err)
	}
	if errors.As(err, &exitErr) {
		out = exitErr.Stdout // a failing plugin's stdout passes through too
	}
	if _, werr := o.Stdout.Write(out); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// wrappedPath decides which file runs, and checks that file against every policy: the
// policy approves a file, and that file is what runs (issue 27, N1).
func (o *Options) wrappedPath() (string, error) {
	approved, err := o.approve(o.Command)
	if err != nil {
		return "", err
	}
	if approved != "" {
		return approved, nil
	}
	environ := o.Environ
	if o.Caller.Known() {
		environ = o.Caller.Environ
	}
	path, err := execplugin.ResolveIn(o.Command, "", environ)
	if err != nil {
		return "", fmt.Errorf("exec-cache: %w", err)
	}
	return path, nil
}

// clientLookPath resolves names as the client resolves an exec block's command: in its
// PATH. Without the client's environment a bare name is not resolved (its own PATH may
// be the exec block's); a path still is.
func (o *Options) clientLookPath() func(string) (string, error) {
	if o.Caller.Known() {
		return func(file string) (string, error) { return execplugin.LookPath(file, o.Caller.Environ) }
	}
	why := o.Caller.unknown()
	return func(file string) (string, error) {
		if filepath.Base(file) != file {
			return execplugin.LookPath(file, nil)
		}
		return "", &exec.Error{Name: file, Err: fmt.Errorf("the client's PATH is unknown (%w), so exec-cache resolves no plugin name; give the plugin's absolute path after -- and list that path in the allowlist", why)}
	}
}

// answerer gives a plugin's answer: its stdout, byte for byte. It is exec-cache's form of
// execcred.Source, for the plugin side of the wire, where an answer is passed on as it is
// (a client decodes it, and reports what is wrong with it).
type answerer interface {
	answer(ctx context.Context) ([]byte, error)
}

// wrapped is the source: the wrapped plugin, run with the wrapper's own environment
// (KUBERNETES_EXEC_INFO included) and stdio, as the client would have run it.
type wrapped struct {
	o           *Options
	path        string
	interactive bool
}

// runsInteractive reports whether the plugin runs with the terminal.
func (w *wrapped) runsInteractive() bool { return w.interactive && w.o.Stdin != nil }

func (w *wrapped) answer(ctx context.Context) ([]byte, error) {
	r := &execplugin.Runner{Environ: func() []string { return w.o.Environ }, Stderr: w.o.Stderr}
	c := execplugin.Command{Path: w.path, Args: w.o.Args}
	if w.runsInteractive() {
		c.Stdin = execplugin.TerminalStdin(w.o.Stdin)
	} else {
		c.Timeout = w.o.Timeout
	}
	res, err := r.Run(ctx, c)
	var exitErr *execplugin.ExitError
	switch {
	case errors.As(err, &exitErr):
		return nil, err // the plugin's own failure, passed through as it is
	case err != nil:
		return nil, fmt.Errorf("exec-cache: %w", err)
	}
	return res.Stdout, nil
}

// diskCache is the decorator: the entry of this call's key, in a directory shared by
// every client process, under the key's file lock, so that concurrent callers wait for one
// run and then find its answer stored.
type diskCache struct {
	o    *Options
	next answerer
	path string // the wrapped plugin's resolved path, part of the key
	info *wire.Info
	log  *slog.Logger
	// interactive: the wrapped plugin runs with the terminal.
	interactive bool
	key         string // Key of this call
}

func (d *diskCache) answer(ctx context.Context) ([]byte, error) {
	o := d.o
	store := d.store()
	key := d.key
	id := store.ID(key)
	log := d.log.With("entry", id[:12])
	locked, err := store.Lock(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("exec-cache: %w", err)
	}
	defer func() { _ = locked.Unlock() }()
	v := newVault(o.Storage, o.Dir, o.Environ, o.KeyringTimeout, o.now)
	defer v.close()

	now := o.now()
	e, out, reason := o.lookup(ctx, v, id, locked, d.info, now, log)
	if e != nil && e.Failure != nil && (e.Failure.Interactive || !d.interactive) {
		log.Debug("exec-cache: answering with the plugin's recent failure", "until", e.Failure.Until)
		return nil, &RecentFailureError{Command: o.Command, Args: o.Args, Failure: *e.Failure, Now: now}
	}
	if e != nil && e.Failure != nil {
		e, reason = nil, "a failure without a terminal, and this run has one"
	}
	if e != nil {
		if e.addClient(o.Client) {
			if err := locked.Save(e); err != nil {
				log.Warn("exec-cache: cannot record the client; a 401 for it will not be noticed", "err", err)
			}
		}
		log.Debug("exec-cache: hit", "client", o.Client.String(), "until", e.ServeUntil)
		return out, nil
	}
	log.Debug("exec-cache: miss, running the plugin", "reason", reason, "command", o.Command)
	if err := v.forget(ctx, id, locked, log); err != nil {
		return nil, fmt.Errorf("exec-cache: removing the entry: %w", err)
	}
	out, err = d.next.answer(ctx)
	if err != nil {
		o.storeFailure(locked, log, d.info, d.path, err, ctx.Err() != nil, d.interactive)
		return nil, err
	}
	o.store(ctx, v, id, locked, log, d.info, d.path, out, now)
	sweep(ctx, v, store, id, now, log)
	return out, nil
}

func (d *diskCache) store() *diskstore.Store {
	store := &diskstore.Store{Dir: d.o.Dir, LockTimeout: d.o.LockTimeout}
	if store.LockTimeout == 0 {
		store.LockTimeout = DefaultLockTimeout
	}
	return store
}

// sweep removes, after a miss, the entries no call may be served any more (expired, or
// unreadable) and writes a crashed process left behind, so that credentials do not pile
// up in the cache directory. Entries another process holds are left for a later sweep.
func sweep(ctx context.Context, v *vault, store *diskstore.Store, current string, now time.Time, log *slog.Logger) {
	stored, err := store.Entries()
	if err != nil {
		log.Debug("exec-cache: sweep", "err", err)
		return
	}
	unservable := func(data []byte) bool {
		var e entry
		return json.Unmarshal(data, &e) != nil || (!e.servable(now) && !e.failing(now))
	}
	for _, s := range stored {
		if s.ID == current || !unservable(s.Data) {
			continue // only what looks unservable is locked and read again
		}
		removed, err := store.RemoveIf(s.ID, func(data []byte) bool {
			if !unservable(data) {
				return false
			}
			// Under the entry's lock: its keyring items go first, and if they cannot,
			// the file stays so that a later sweep can try again.
			var e entry
			if json.Unmarshal(data, &e) == nil {
				if err := v.drop(ctx, s.ID, &e); err != nil {
					log.Debug("exec-cache: sweep: keeping an entry whose keyring items cannot be removed", "entry", s.ID[:12], "err", err)
					return false
				}
			}
			return true
		})
		if err != nil || removed {
			log.Debug("exec-cache: swept", "entry", s.ID[:12], "err", err)
		}
	}
	if err := store.RemoveTemp(time.Minute); err != nil {
		log.Debug("exec-cache: sweeping unfinished writes", "err", err)
	}
}

// lookup returns the locked entry and its answer if it may be served to this call (or
// an entry whose failure answers it, without an answer), or else why not.
func (o *Options) lookup(ctx context.Context, v *vault, id string, locked *diskstore.Locked, info *wire.Info, now time.Time, log *slog.Logger) (*entry, []byte, string) {
	var e entry
	err := locked.Load(&e)
	switch {
	case errors.Is(err, diskstore.ErrNoEntry):
		return nil, nil, "no entry"
	case err != nil:
		log.Debug("exec-cache: ignoring a corrupt entry", "err", err)
		return nil, nil, "unreadable entry (replaced)"
	case e.failing(now):
		return &e, nil, ""
	case !e.servable(now):
		return nil, nil, "expired"
	case info.Response != nil && !o.tooSoon(&e, now, log):
		return nil, nil, fmt.Sprintf("the client says the credential was rejected (spec.response code %d)", info.Response.Code)
	case e.servedTo(o.Client) && !o.tooSoon(&e, now, log):
		return nil, nil, fmt.Sprintf("second call from the client %s it was served to: a refresh after a 401", o.Client)
	}
	if why := v.mismatch(&e); why != "" {
		return nil, nil, why + " (replaced)"
	}
	out, err := v.get(ctx, id, &e)
	if errors.Is(err, oskeyring.ErrNotFound) {
		return nil, nil, "the answer is gone from the keyring (" + err.Error() + ")"
	}
	if err != nil {
		log.Warn("exec-cache: cannot read the answer from the keyring; running the plugin", "err", err)
		return nil, nil, "keyring: " + err.Error()
	}
	if _, err := wire.Decode(info.APIVersion, out); err != nil {
		return nil, nil, "invalid stored answer (replaced)"
	}
	return &e, out, ""
}

// tooSoon reports whether e is too fresh for a refresh to replace it (RefreshAfter).
func (o *Options) tooSoon(e *entry, now time.Time, log *slog.Logger) bool {
	if o.RefreshAfter <= 0 || now.Sub(e.Stored) >= o.RefreshAfter {
		return false
	}
	log.Debug("exec-cache: a refresh, but the answer is younger than the refresh bound; serving it", "stored", e.Stored, "bound", o.RefreshAfter)
	return true
}

// store saves a successful answer if it may be cached; a reason not to is logged.
func (o *Options) store(ctx context.Context, v *vault, id string, locked *diskstore.Locked, log *slog.Logger, info *wire.Info, path string, out []byte, started time.Time) {
	status, err := wire.Decode(info.APIVersion, out)
	if err != nil {
		log.Warn("exec-cache: not caching the answer: it is not a valid ExecCredential", "err", err)
		return
	}
	if why := status.Unstorable(); why != "" {
		log.Debug("exec-cache: not caching the answer: " + why)
		return
	}
	var expiration *time.Time
	if t := status.ExpirationTimestamp; t != nil && !t.IsZero() {
		expiration = &t.Time
	}
	until, ok := serveUntil(started, expiration, o.skew(), o.DefaultTTL)
	if !ok {
		log.Debug("exec-cache: not caching the answer", "expirationTimestamp", expiration, "defaultTTL", o.DefaultTTL)
		return
	}
	e := entry{
		Schema: entrySchema, Command: path, Args: o.Args, APIVersion: info.APIVersion,
		Stored: started, Expiration: expiration, ServeUntil: until,
	}
	if info.Cluster != nil {
		e.Server = info.Cluster.Server
	}
	if err := v.put(ctx, id, &e, out); err != nil {
		// Not cached, but served: the next call runs the plugin again.
		log.Warn("exec-cache: not caching the answer: " + err.Error())
		return
	}
	e.addClient(o.Client)
	if err := locked.Save(e); err != nil {
		log.Warn("exec-cache: cannot store the answer", "err", err)
		if err := v.drop(ctx, id, &e); err != nil {
			log.Warn("exec-cache: cannot remove the answer from the keyring", "err", err)
		}
	}
}

// execInfo parses the last KUBERNETES_EXEC_INFO in env, as the plugin would see it; nil
// when it is unset or empty.
func execInfo(env []string) (*wire.Info, error) {
	value := lookupEnv(env, wire.InfoEnv)
	if value == "" {
		return nil, nil
	}
	info, err := wire.LoadInfo(value)
	if err != nil {
		return nil, &InfoError{Err: err}
	}
	return info, nil
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Options) skew() time.Duration {
	switch {
	case o.Skew == 0:
		return DefaultSkew
	case o.Skew < 0:
		return 0
	}
	return o.Skew
}

// storeFailure records a failed or cancelled run as the entry's answer for the failure
// window, unless the window is off.
func (o *Options) storeFailure(locked *diskstore.Locked, log *slog.Logger, info *wire.Info, path string, err error, cancelled, interactive bool) {
	window := o.Failures
	switch {
	case window == 0:
		window = DefaultFailureWindow
	case window < 0:
		return
	}
	now := o.now()
	f := &failure{At: now, Until: now.Add(window), Code: 1, Cancelled: cancelled, Interactive: interactive}
	var exitErr *execplugin.ExitError
	if errors.As(err, &exitErr) && exitErr.Code > 0 && !cancelled {
		f.Code = exitErr.Code
	}
	e := entry{Schema: entrySchema, Command: path, Args: o.Args, APIVersion: info.APIVersion, Stored: now, Failure: f}
	if info.Cluster != nil {
		e.Server = info.Cluster.Server
	}
	if serr := locked.Save(e); serr != nil {
		log.Warn("exec-cache: cannot record the plugin's failure; the next caller runs it again", "err", serr)
	}
}

// afterFailure is a caller without a terminal whose plugin failed (now or within the
// failure window): it tells the person what to run in a terminal and, with WaitLogin,
// waits for that login's answer to be stored, polling the entry.
func (d *diskCache) afterFailure(ctx context.Context, err error) ([]byte, error) {
	o := d.o
	fmt.Fprintf(o.Stderr, "exec-cache: %s ran without a terminal, because this client cannot prompt. If it needs one to log in, "+
		"run a kubectl command with the same kubeconfig and context in a terminal (e.g. kubectl auth whoami); "+
		"this client is then served that login from the cache.\n", o.Command)
	if o.WaitLogin <= 0 {
		return nil, err
	}
	fmt.Fprintf(o.Stderr, "exec-cache: waiting up to %v for that login...\n", o.WaitLogin)
	ctx, cancel := context.WithTimeout(ctx, o.WaitLogin)
	defer cancel()
	store := d.store()
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, err
		case <-tick.C:
		}
		// The key again: the login may have switched an identity file (`gcloud auth
		// login` sets the account), and then its answer is stored under the new key.
		if out := d.peek(ctx, store, Key(d.path, o.Args, o.Environ, d.info, o.KeyEnv)); out != nil {
			return out, nil
		}
	}
}

// peek returns the answer stored for key if one may be served to this caller now.
func (d *diskCache) peek(ctx context.Context, store *diskstore.Store, key string) []byte {
	locked, err := store.Lock(ctx, key)
	if err != nil {
		return nil
	}
	defer func() { _ = locked.Unlock() }()
	var e entry
	if locked.Load(&e) != nil || !e.servable(d.o.now()) {
		return nil
	}
	v := newVault(d.o.Storage, d.o.Dir, d.o.Environ, d.o.KeyringTimeout, d.o.now)
	defer v.close()
	if v.mismatch(&e) != "" {
		return nil
	}
	out, err := v.get(ctx, store.ID(key), &e)
	if err != nil {
		return nil
	}
	if e.addClient(d.o.Client) {
		_ = locked.Save(e)
	}
	return out
}

// RecentFailureError answers a caller with the wrapped plugin's recent failure, within
// the failure window, instead of running it again.
type RecentFailureError struct {
	Command string
	Args    []string
	Failure failure
	Now     time.Time
}

func (e *RecentFailureError) Error() string {
	what := fmt.Sprintf("failed with exit code %d", e.Failure.Code)
	if e.Failure.Cancelled {
		what = "was cancelled"
	}
	retry := strings.Join(append([]string{"kplug", "exec-cache", "--clear", "--", e.Command}, redactArgs(e.Args)...), " ")
	return fmt.Sprintf("exec-cache: %s %s %v ago; to spare you another login, this answer stands until %s (%s); to try again now, run: %s",
		e.Command, what, e.Now.Sub(e.Failure.At).Round(time.Second), e.Failure.Until.Format(time.TimeOnly),
		Relative(e.Failure.Until, e.Now), retry)
}

// ExitCode is the exit code of the failure it repeats.
func (e *RecentFailureError) ExitCode() int { return e.Failure.Code }
