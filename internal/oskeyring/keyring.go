package oskeyring

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Names of the keyrings: what Open takes and Keyring.Name returns.
const (
	// Auto is the keyring of the platform: Keychain on macOS, Credential Manager on
	// Windows; on Linux the Secret Service when the session bus has one, else the kernel
	// keyring.
	Auto              = "keyring"
	SecretService     = "secret-service"
	Kernel            = "kernel-keyring"
	Keychain          = "keychain"
	CredentialManager = "credential-manager" //nolint:gosec // a keyring's name, not a credential
)

// DefaultTimeout bounds each call to a keyring (connecting included) when Config.Timeout is
// zero: long enough for a busy desktop, short enough that a wedged daemon is an error
// rather than a hung kubectl.
const DefaultTimeout = 5 * time.Second

// The most bytes of secret one item holds, header included, in each keyring: what Put
// splits a blob by.
const (
	// kernelItemLimit: a "user" key holds at most 32767 bytes; smaller items leave room
	// in the per-user quota (/proc/sys/kernel/keys/maxbytes, 20000 for non-root users).
	kernelItemLimit = 16 << 10
	// ssItemLimit keeps items small; a Secret Service has no limit of its own that
	// matters here, but it keeps every item in memory and rewrites its file on a change.
	ssItemLimit = 64 << 10
	// keychainItemLimit: go-keyring refuses a `security -i` command line over 4096
	// bytes, and base64-encodes the secret in it: 4/3 of 2800 is 3734, which leaves
	// room for the command, the service and the account (under 100 bytes here).
	keychainItemLimit = 2800
	// credentialManagerItemLimit is CRED_MAX_CREDENTIAL_BLOB_SIZE (5*512 bytes).
	credentialManagerItemLimit = 2560
)

// ErrNotFound says the keyring holds no such item, or (from Fetch) not a whole blob of
// the expected write.
var ErrNotFound = errors.New("no such keyring item")

// ErrTooBig says a secret does not fit in the keyring: larger than Put stores, or beyond
// the space the keyring grants the user.
var ErrTooBig = errors.New("too big for the keyring")

// Keyring is one OS keyring, holding the items of one service (Config.Service). An
// implementation is safe for use by one goroutine at a time; Close releases its
// connection, if any.
type Keyring interface {
	// Name is one of the names above (never Auto).
	Name() string
	// ItemLimit is the most bytes of secret one item holds.
	ItemLimit() int
	// Set creates or replaces the item named it.Account.
	Set(ctx context.Context, it Item) error
	// Get returns an item's secret, or ErrNotFound.
	Get(ctx context.Context, account string) ([]byte, error)
	// Delete removes an item; a missing one is not an error.
	Delete(ctx context.Context, account string) error
	Close() error
}

// Lister is a Keyring that can name the items it holds for the service, for removing
// what an index lost track of.
type Lister interface {
	Accounts(ctx context.Context) ([]string, error)
}

// Item is one secret and how it is named.
type Item struct {
	// Account names the item within the service.
	Account string
	// Label is what a keyring manager (Seahorse, Keychain Access) shows; never secret.
	Label  string
	Secret []byte
	// TTL asks the keyring to drop the item by itself after this long, where it can (the
	// kernel keyring); zero keeps it until it is deleted.
	TTL time.Duration
}

// Config says which items are kplug's and how to reach the keyring.
type Config struct {
	// Service names kplug's items: the Keychain service, the prefix of Credential Manager
	// targets and kernel key descriptions, the Secret Service "service" attribute.
	Service string
	// Environ is the environment that locates the session bus on Linux
	// (DBUS_SESSION_BUS_ADDRESS, XDG_RUNTIME_DIR); nothing else is read from it.
	Environ []string
	// Timeout bounds each call; zero means DefaultTimeout.
	Timeout time.Duration
}

func (c *Config) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// Error says a keyring could not do what was asked: unreachable, locked, refused or
// full. Err is the cause (ErrTooBig for a full keyring); Hint says what to do.
type Error struct {
	Keyring string
	Op      string
	Err     error
	Hint    string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s keyring: %s: %v", e.Keyring, e.Op, e.Err)
	if e.Hint != "" {
		s += "; " + e.Hint
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Open connects to the keyring called name (Auto for the platform's), or says why it
// cannot. Nothing is connected before Open is called.
func Open(ctx context.Context, name string, cfg Config) (Keyring, error) {
	if cfg.Service == "" {
		return nil, errors.New("oskeyring: no service name")
	}
	if name == "" {
		name = Auto
	}
	return open(ctx, name, &cfg)
}

// getenv returns the last value of name in environ.
func getenv(environ []string, name string) string {
	v := ""
	for _, kv := range environ {
		if len(kv) > len(name) && kv[len(name)] == '=' && kv[:len(name)] == name {
			v = kv[len(name)+1:]
		}
	}
	return v
}
