package modify

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// ClientCertOptions configure NewClientCertificate.
type ClientCertOptions struct {
	// CertFile is the PEM certificate, optionally followed by its intermediates. Empty
	// means the certificate object stored on the PKCS#11 token under the key's label.
	CertFile string
	// Key finds the certificate's private key (OpenKey). Required; closed by Close.
	Key KeySource
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
// two quick writes apart. A changed, valid certificate with a matching key is used from then on: new
// connections authenticate with it, and sessions resumed under the old one are forgotten.
// Open connections, and the streams on them, are left alone. A replacement that is
// unreadable, expired or without its key is logged and the current certificate kept.
//
// Resumed TLS sessions need no signature, so a hardware key signs once per full
// handshake, not per request or per connection.
//
// Methods are safe for concurrent use.
type ClientCertificate struct {
	o     ClientCertOptions
	cache *rotatingSessionCache

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string    // the certificate file's content in use
	refused string    // the last replacement that could not be used
	retry   time.Time // when to try that replacement again (its key may still be coming)
	gen     uint64    // rotations so far
	rotated time.Time // when the last rotation was
}

// NewClientCertificate loads the certificate and its key and checks them: the certificate
// is valid now, its key type is one TLS can use, and the key matches it.
func NewClientCertificate(o ClientCertOptions) (*ClientCertificate, error) {
	if o.Key == nil {
		return nil, errors.New("client certificate: no key")
	}
	if _, onToken := o.Key.(certificateHolder); o.CertFile == "" && !onToken {
		return nil, errors.New("client certificate: no certificate file, and the key is not on a token that could hold the certificate")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &ClientCertificate{o: o}
	c.cache = &rotatingSessionCache{c: c}
	st, err := c.read()
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	if c.cert, err = c.load(st); err != nil {
		return nil, fmt.Errorf("client certificate %s: %w", c.source(), err)
	}
	c.stamp = string(st)
	return c, nil
}

// read returns the certificate (PEM), from the file or the token.
func (c *ClientCertificate) read() ([]byte, error) {
	if c.o.CertFile == "" {
		return c.o.Key.(certificateHolder).certificate()
	}
	return os.ReadFile(c.o.CertFile)
}

// source names where the certificate comes from, for messages.
func (c *ClientCertificate) source() string {
	if c.o.CertFile == "" {
		return "on the token"
	}
	return c.o.CertFile
}

// load parses the certificate, checks it and finds its key.
func (c *ClientCertificate) load(b []byte) (*tls.Certificate, error) {
	var chain [][]byte
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			chain = append(chain, block.Bytes)
		}
	}
	if len(chain) == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return nil, err
	}
	now := c.o.Now()
	switch {
	case now.After(leaf.NotAfter):
		return nil, fmt.Errorf("certificate for %q expired at %s", leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, fmt.Errorf("certificate for %q is not valid before %s", leaf.Subject.CommonName, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if err := checkTLSKeyType(leaf.PublicKey); err != nil {
		return nil, err
	}
	key, err := c.o.Key.Key(leaf.PublicKey)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}

// current returns the certificate to use now and its generation, first taking up a
// replaced certificate file.
func (c *ClientCertificate) current() (*tls.Certificate, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.read()
	st := string(b)
	if err != nil || st == c.stamp || st == c.refused && c.o.Now().Before(c.retry) {
		return c.cert, c.gen
	}
	cert, err := c.load(b)
	if err != nil {
		// Possibly half-written, or its new key not written yet: try again in a while.
		if st != c.refused {
			c.log().Warn("client certificate: keeping the current certificate; its replacement cannot be used", "source", c.source(), "error", err)
		}
		c.refused, c.retry = st, c.o.Now().Add(time.Second)
		return c.cert, c.gen
	}
	c.cert, c.stamp, c.refused = cert, st, ""
	c.gen++
	c.rotated = c.o.Now()
	c.log().Info("client certificate: rotated", "source", c.source(), "subject", cert.Leaf.Subject.String(), "notAfter", cert.Leaf.NotAfter)
	return c.cert, c.gen
}

func (c *ClientCertificate) log() *slog.Logger {
	if c.o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.o.Logger
}

// GetClientCertificate is a tls.Config.GetClientCertificate.
func (c *ClientCertificate) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, _ := c.current()
	return cert, nil
}

// Leaf returns the certificate in use.
func (c *ClientCertificate) Leaf() *x509.Certificate {
	cert, _ := c.current()
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
	_, gen := s.c.current()
	return s.forGen(gen).Get(key)
}

// Put keeps a session for later connections, except shortly after a rotation: in TLS 1.3
// the session ticket arrives after the handshake, so a connection made with the old
// certificate just before the rotation could otherwise put a session with the old identity
// into the new generation's cache.
func (s *rotatingSessionCache) Put(key string, cs *tls.ClientSessionState) {
	s.c.mu.Lock()
	gen, sinceRotation := s.c.gen, s.c.o.Now().Sub(s.c.rotated)
	s.c.mu.Unlock()
	if gen > 0 && sinceRotation < rotationGrace {
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
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch)
		t := time.NewTicker(interval)
		defer t.Stop()
		_, last := c.current()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, gen := c.current(); gen != last {
				last = gen
				select {
				case ch <- struct{}{}:
				default: // one pending signal is enough
				}
			}
		}
	}()
	return ch
}
