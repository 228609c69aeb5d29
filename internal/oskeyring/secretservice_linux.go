package oskeyring

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/godbus/dbus/v5"
)

// secretService is the freedesktop.org Secret Service (GNOME Keyring, KeePassXC, KWallet's
// ksecretd) on the session bus: items in the default collection, found by the attributes
// service and account (so `secret-tool lookup service S account A` finds them). Every call
// has a deadline, and the connection is closed when it passes, so a bus or daemon that
// does not answer is an error after Config.Timeout, never a hang. A locked collection is
// an error too: exec-cache runs under clients that cannot answer an unlock prompt.
type secretService struct {
	conn       *dbus.Conn
	stop       context.CancelFunc // closes conn
	service    string
	timeout    time.Duration
	session    dbus.ObjectPath
	collection dbus.ObjectPath
}

const (
	ssName       = "org.freedesktop.secrets"
	ssPath       = dbus.ObjectPath("/org/freedesktop/secrets")
	ssService    = "org.freedesktop.Secret.Service"
	ssCollection = "org.freedesktop.Secret.Collection"
	ssItem       = "org.freedesktop.Secret.Item"
	ssSession    = "org.freedesktop.Secret.Session"
	noPrompt     = dbus.ObjectPath("/")
)

// ssSecret is the Secret Service's Secret struct, (oayays).
type ssSecret struct {
	Session     dbus.ObjectPath
	Parameters  []byte
	Value       []byte
	ContentType string
}

// dialBus connects to the session bus at address within timeout; the connection lives
// until the returned cancel is called.
func dialBus(ctx context.Context, address string, timeout time.Duration) (*dbus.Conn, context.CancelFunc, error) {
	life, cancel := context.WithCancel(context.Background())
	conn, err := dbus.Dial(address, dbus.WithContext(life))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	hctx, hcancel := context.WithTimeout(ctx, timeout)
	defer hcancel()
	// The handshake has no context of its own: if the deadline passes first, closing the
	// connection ends it.
	stop := context.AfterFunc(hctx, cancel)
	err = conn.Auth(nil)
	if err == nil {
		err = conn.Hello()
	}
	if !stop() || err != nil {
		cancel()
		_ = conn.Close()
		if hctx.Err() != nil {
			return nil, nil, fmt.Errorf("the bus did not complete the handshake within %v", timeout)
		}
		return nil, nil, err
	}
	return conn, func() { cancel(); _ = conn.Close() }, nil
}

// hasSecretService reports whether the bus has a Secret Service running or ready to
// start on demand.
func hasSecretService(ctx context.Context, conn *dbus.Conn, timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var owned bool
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, ssName).Store(&owned); err != nil {
		return false, err
	}
	if owned {
		return true, nil
	}
	var names []string
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.ListActivatableNames", 0).Store(&names); err != nil {
		return false, err
	}
	for _, n := range names {
		if n == ssName {
			return true, nil
		}
	}
	return false, nil
}

// newSecretService opens a session with the Secret Service on conn and finds its default
// collection. It takes over conn: on error, conn is closed.
func newSecretService(ctx context.Context, conn *dbus.Conn, stop context.CancelFunc, cfg *Config) (*secretService, error) {
	s := &secretService{conn: conn, stop: stop, service: cfg.Service, timeout: cfg.timeout()}
	err := s.call(ctx, ssPath, ssService+".OpenSession", []any{"plain", dbus.MakeVariant("")}, new(dbus.Variant), &s.session)
	if err == nil {
		err = s.call(ctx, ssPath, ssService+".ReadAlias", []any{"default"}, &s.collection)
	}
	if err == nil && s.collection == noPrompt {
		err = errors.New("it has no default collection (create one, e.g. with Seahorse, \"Passwords and Keys\")")
	}
	if err != nil {
		stop()
		return nil, ssError("opening a session", err)
	}
	return s, nil
}

func (s *secretService) Name() string   { return SecretService }
func (s *secretService) ItemLimit() int { return ssItemLimit }

func (s *secretService) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	err := s.conn.Object(ssName, s.session).CallWithContext(ctx, ssSession+".Close", 0).Err
	s.stop()
	return err
}

// call calls method on the object at path, bounded by the timeout, and stores the reply.
func (s *secretService) call(ctx context.Context, path dbus.ObjectPath, method string, args []any, reply ...any) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c := s.conn.Object(ssName, path).CallWithContext(ctx, method, 0, args...)
	if c.Err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no answer within %v (%w)", s.timeout, c.Err)
		}
		return c.Err
	}
	if len(reply) == 0 {
		return nil
	}
	return c.Store(reply...)
}

func (s *secretService) attributes(account string) map[string]string {
	a := map[string]string{"service": s.service}
	if account != "" {
		a["account"] = account
	}
	return a
}

// search returns the unlocked items with the attributes; items that are there but locked
// are an error, since reading them would need a prompt.
func (s *secretService) search(ctx context.Context, attrs map[string]string) ([]dbus.ObjectPath, error) {
	var unlocked, locked []dbus.ObjectPath
	if err := s.call(ctx, ssPath, ssService+".SearchItems", []any{attrs}, &unlocked, &locked); err != nil {
		return nil, err
	}
	if len(unlocked) == 0 && len(locked) > 0 {
		return nil, errLocked
	}
	return unlocked, nil
}

var errLocked = errors.New("the collection holding the item is locked")

func (s *secretService) Set(ctx context.Context, it Item) error {
	props := map[string]dbus.Variant{
		ssItem + ".Label":      dbus.MakeVariant(it.Label),
		ssItem + ".Attributes": dbus.MakeVariant(s.attributes(it.Account)),
	}
	secret := ssSecret{Session: s.session, Parameters: []byte{}, Value: it.Secret, ContentType: "application/octet-stream"}
	var item, prompt dbus.ObjectPath
	err := s.call(ctx, s.collection, ssCollection+".CreateItem", []any{props, secret, true}, &item, &prompt)
	if err == nil && prompt != noPrompt {
		_ = s.call(ctx, prompt, "org.freedesktop.Secret.Prompt.Dismiss", nil)
		err = errLocked
	}
	if err != nil {
		return ssError("storing "+it.Account, err)
	}
	return nil
}

func (s *secretService) Get(ctx context.Context, account string) ([]byte, error) {
	items, err := s.search(ctx, s.attributes(account))
	if err != nil {
		return nil, ssError("looking up "+account, err)
	}
	if len(items) == 0 {
		return nil, ErrNotFound
	}
	var secret ssSecret
	if err := s.call(ctx, items[0], ssItem+".GetSecret", []any{s.session}, &secret); err != nil {
		return nil, ssError("reading "+account, err)
	}
	return secret.Value, nil
}

func (s *secretService) Delete(ctx context.Context, account string) error {
	items, err := s.search(ctx, s.attributes(account))
	if err != nil {
		return ssError("looking up "+account, err)
	}
	for _, item := range items {
		var prompt dbus.ObjectPath
		if err := s.call(ctx, item, ssItem+".Delete", nil, &prompt); err != nil {
			return ssError("deleting "+account, err)
		}
		if prompt != noPrompt {
			_ = s.call(ctx, prompt, "org.freedesktop.Secret.Prompt.Dismiss", nil)
			return ssError("deleting "+account, errLocked)
		}
	}
	return nil
}

// Accounts lists the accounts of the service's unlocked items.
func (s *secretService) Accounts(ctx context.Context) ([]string, error) {
	items, err := s.search(ctx, s.attributes(""))
	if err != nil {
		return nil, ssError("listing items", err)
	}
	var out []string
	for _, item := range items {
		var v dbus.Variant
		if err := s.call(ctx, item, "org.freedesktop.DBus.Properties.Get", []any{ssItem, "Attributes"}, &v); err != nil {
			return nil, ssError("listing items", err)
		}
		if attrs, ok := v.Value().(map[string]string); ok && attrs["account"] != "" {
			out = append(out, attrs["account"])
		}
	}
	return out, nil
}

func ssError(op string, err error) error {
	e := &Error{Keyring: SecretService, Op: op, Err: err}
	if errors.Is(err, errLocked) {
		e.Hint = "unlock it (log in to the desktop, or open \"Passwords and Keys\") or use another --storage"
	}
	var de dbus.Error
	if errors.As(err, &de) && de.Name == "org.freedesktop.Secret.Error.IsLocked" {
		e.Err = errLocked
		e.Hint = "unlock it (log in to the desktop, or open \"Passwords and Keys\") or use another --storage"
	}
	return e
}
