package keys

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/kplug/kplug/internal/certreload"
)

// ClientCertOptions configure NewClientCertificate.
type ClientCertOptions struct {
	// CertFile is the PEM certificate, optionally followed by its intermediates. Empty
	// means the certificate object stored on the PKCS#11 token under the key's label.
	CertFile string
	// Key finds the certificate's private key (Open). Required; closed by Close.
	Key Source
	// Now is the clock for validity checks; nil means time.Now.
	Now func() time.Time
	// Logger hears about rotations and about replacement certificates that are refused;
	// nil discards.
	Logger *slog.Logger
}

// ClientCertificate is a TLS client certificate whose key may be held outside the process,
// for execproxy/server.Options.GetClientCertificate and ClientSessionCache.
//
// It reads the certificate file (or the token's certificate object) again whenever a new
// connection starts: a few kilobytes, and no signature; file times are too coarse to tell
// two quick writes apart. A changed, valid certificate with a matching key is used from
// then on: new connections authenticate with it, and sessions resumed under the old one
// are forgotten. Open connections, and the streams on them, are left alone. A replacement
// that is unreadable, expired or without its key is logged and the current certificate
// kept. (kplug's one reloading certificate does this; ClientCertificate adds the key
// source and the session cache.)
//
// Resumed TLS sessions need no signature, so a hardware key signs once per full
// handshake, not per request or per connection.
//
// Methods are safe for concurrent use.
type ClientCertificate struct {
	o     ClientCertOptions
	cert  *certreload.Certificate
	cache *rotatingSessionCache
}

// NewClientCertificate loads the certificate and its key and checks them: the certificate
// is valid now, its key type is one TLS can use, and the key matches it.
func NewClientCertificate(o ClientCertOptions) (*ClientCertificate, error) {
	if o.Key == nil {
		return nil, errors.New("client certificate: no key")
	}
	holder, onToken := o.Key.(certificateHolder)
	if o.CertFile == "" && !onToken {
		return nil, errors.New("client certificate: no certificate file, and the key is not on a token that could hold the certificate")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	src := certreload.Source{
		Name: o.CertFile,
		Read: func() ([]byte, error) { return os.ReadFile(o.CertFile) },
		Key:  func(leaf *x509.Certificate) (crypto.PrivateKey, error) { return o.Key.Key(leaf.PublicKey) },
		Check: func(leaf *x509.Certificate) error {
			now := o.Now()
			switch {
			case now.After(leaf.NotAfter):
				return fmt.Errorf("certificate for %q expired at %s", leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
			case now.Before(leaf.NotBefore):
				return fmt.Errorf("certificate for %q is not valid before %s", leaf.Subject.CommonName, leaf.NotBefore.UTC().Format(time.RFC3339))
			}
			return checkTLSKeyType(leaf.PublicKey)
		},
		Now:    o.Now,
		Logger: o.Logger,
	}
	if o.CertFile == "" {
		src.Name, src.Read = "on the token", holder.certificate
	}
	cert, err := certreload.New(src)
	if err != nil {
		var unusable *certreload.UnusableError
		if errors.As(err, &unusable) {
			return nil, fmt.Errorf("client certificate %w", err)
		}
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	c := &ClientCertificate{o: o, cert: cert}
	c.cache = &rotatingSessionCache{c: c}
	return c, nil
}

// GetClientCertificate is a tls.Config.GetClientCertificate.
func (c *ClientCertificate) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, _ := c.cert.Current()
	return cert, nil
}

// Leaf returns the certificate in use.
func (c *ClientCertificate) Leaf() *x509.Certificate {
	cert, _ := c.cert.Current()
	return cert.Leaf
}

// ClientSessionCache is a tls.Config.ClientSessionCache that forgets its sessions when the
// certificate changes, since a resumed session keeps the identity it was made with.
func (c *ClientCertificate) ClientSessionCache() tls.ClientSessionCache { return c.cache }

// Close closes the key source.
func (c *ClientCertificate) Close() error { return c.o.Key.Close() }

// rotatingSessionCache is an LRU session cache emptied on each certificate generation.
type rotatingSessionCache struct {
	c   *ClientCertificate
	mu  sync.Mutex
	gen uint64
	lru tls.ClientSessionCache
}

func (s *rotatingSessionCache) forGen(gen uint64) tls.ClientSessionCache {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lru == nil || s.gen != gen {
		s.lru, s.gen = tls.NewLRUClientSessionCache(64), gen
	}
	return s.lru
}

// Get runs as a connection starts: the moment to notice a new certificate.
func (s *rotatingSessionCache) Get(key string) (*tls.ClientSessionState, bool) {
	_, gen := s.c.cert.Current()
	return s.forGen(gen).Get(key)
}

// Put keeps a session for later connections, except shortly after a rotation: in TLS 1.3
// the session ticket arrives after the handshake, so a connection made with the old
// certificate just before the rotation could otherwise put a session with the old identity
// into the new generation's cache.
func (s *rotatingSessionCache) Put(key string, cs *tls.ClientSessionState) {
	gen, rotated := s.c.cert.Rotation()
	if gen > 0 && s.c.o.Now().Sub(rotated) < rotationGrace {
		return
	}
	s.forGen(gen).Put(key, cs)
}

// rotationGrace outlasts any handshake that began before a rotation (net/http gives a
// TLS handshake 10 s), and so any session ticket such a handshake brings.
const rotationGrace = 30 * time.Second

// Watch checks the certificate every interval until ctx ends, and sends on the
// returned channel after each rotation (for execproxy/server.Options.CloseIdleConnections,
// so that pooled connections do not keep the old identity). The channel is closed when
// ctx ends.
func (c *ClientCertificate) Watch(ctx context.Context, interval time.Duration) <-chan struct{} {
	return c.cert.Watch(ctx, interval)
}
