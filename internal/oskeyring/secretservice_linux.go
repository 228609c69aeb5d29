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
	registered bool // the daemon has answered a call: it knows this connection
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

// newSecretService wraps conn, a connection to a bus with a Secret Service. It takes over
// conn.
func newSecretService(conn *dbus.Conn, stop context.CancelFunc, cfg *Config) *secretService {
	return &secretService{conn: conn, stop: stop, service: cfg.Service, timeout: cfg.timeout()}
}

// openSession opens, once, the session that secrets travel in: the "plain" algorithm,
// since they cross only the user's own bus socket, as they do between the bus and the
// daemon anyway.
//
// It is never the first call of a connection to the daemon: gnome-keyring-daemon (42
// and later) registers a caller in an idle callback that races with the dispatch of its
// first method, and a client whose first call is OpenSession could make it abort
// (gkd_secret_service_get_pkcs11_session: assertion 'client' failed), once in a few
// hundred to a few thousand short-lived clients here, as users of other Secret Service
// clients report. A search or an alias lookup first registers the caller; they do not
// need it.
func (s *secretService) openSession(ctx context.Context) (dbus.ObjectPath, error) {
	if s.session != "" {
		return s.session, nil
	}
	var session dbus.ObjectPath
	if err := s.call(ctx, ssPath, ssService+".OpenSession", []any{"plain", dbus.MakeVariant("")}, new(dbus.Variant), &session); err != nil {
		return "", err
	}
	s.session = session
	return session, nil
}

// defaultCollection finds, once, the collection new items go to.
func (s *secretService) defaultCollection(ctx context.Context) (dbus.ObjectPath, error) {
	if s.collection != "" {
		return s.collection, nil
	}
	var c dbus.ObjectPath
	if err := s.call(ctx, ssPath, ssService+".ReadAlias", []any{"default"}, &c); err != nil {
		return "", err
	}
	if c == noPrompt {
		return "", errors.New("it has no default collection (create one, e.g. with Seahorse, \"Passwords and Keys\")")
	}
	s.collection = c
	return c, nil
}

func (s *secretService) Name() string   { return SecretService }
func (s *secretService) ItemLimit() int { return ssItemLimit }

// Close closes the session, then disconnects. Leaving the session to be closed by the
// disconnection alone is not enough: gnome-keyring-daemon 42 was seen to abort on an
// assertion (plain_negotiate) after some hundreds of clients that did so in a row
// (BenchmarkRunHitStorage).
func (s *secretService) Close() error {
	var err error
	if s.session != "" {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		err = s.conn.Object(ssName, s.session).CallWithContext(ctx, ssSession+".Close", 0).Err
	}
	s.stop()
	return err
}

// call calls method on the object at path, bounded by the timeout, and stores the reply.
func (s *secretService) call(ctx context.Context, path dbus.ObjectPath, method string, args []any, reply ...any) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c := s.conn.Object(ssName, path).CallWithContext(ctx, method, 0, args...)
	var de dbus.Error
	if !s.registered && errors.As(c.Err, &de) && de.Name == "org.freedesktop.DBus.Error.UnknownMethod" {
		// The same race as in openSession, on a call that survives it: gnome-keyring
		// answers that the method does not exist. The caller is registered now.
		c = s.conn.Object(ssName, path).CallWithContext(ctx, method, 0, args...)
	}
	s.registered = true
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
	secret := ssSecret{Parameters: []byte{}, Value: it.Secret, ContentType: "application/octet-stream"}
	var item, prompt dbus.ObjectPath
	collection, err := s.defaultCollection(ctx)
	if err == nil {
		secret.Session, err = s.openSession(ctx)
	}
	if err == nil {
		err = s.call(ctx, collection, ssCollection+".CreateItem", []any{props, secret, true}, &item, &prompt)
	}
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
	session, err := s.openSession(ctx)
	if err != nil {
		return nil, ssError("opening a session", err)
	}
	var secret ssSecret
	if err := s.call(ctx, items[0], ssItem+".GetSecret", []any{session}, &secret); err != nil {
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
