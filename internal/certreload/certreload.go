// Package certreload is kplug's one reloading certificate: a TLS certificate read again
// from where it is kept (a file, a hardware token) when its content changes, so that a
// rotated certificate is used without a restart, by servers (GetCertificate) and clients
// (GetClientCertificate) alike.
//
// Changes are noticed by content, not by file times, which are too coarse to tell two
// quick writes apart and which a token object does not have. A replacement that cannot be
// used (half written, its key not there yet, expired) is logged once and the current
// certificate kept; it is tried again a second later. Each rotation counts a generation,
// so that users can forget TLS sessions or close connections made with the old identity.
package certreload

import (
	"context"
	"crypto"
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

// Source says where a certificate is kept.
type Source struct {
	// Name says where the certificate comes from, for messages (a file name).
	Name string
	// Read returns the certificate as PEM, optionally followed by its intermediates.
	Read func() ([]byte, error)
	// Key returns the private key of leaf: read from a file, or found on a token.
	Key func(leaf *x509.Certificate) (crypto.PrivateKey, error)
	// Check, if set, refuses a certificate that must not be used (expired, say).
	Check func(leaf *x509.Certificate) error
	// MinInterval, if positive, reads the source at most this often; zero reads it on
	// every use (a few kilobytes, no signature).
	MinInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger hears about rotations and refused replacements; nil discards.
	Logger *slog.Logger
}

// Files is the Source of a certificate and key kept in PEM files. The key file is read
// again with each new certificate.
func Files(certFile, keyFile string) Source {
	return Source{
		Name: certFile,
		Read: func() ([]byte, error) { return os.ReadFile(certFile) }, //nolint:gosec // the operator names the file
		Key: func(leaf *x509.Certificate) (crypto.PrivateKey, error) {
			keyPEM, err := os.ReadFile(keyFile) //nolint:gosec // the operator names the file
			if err != nil {
				return nil, err
			}
			pair, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), keyPEM)
			if err != nil {
				return nil, fmt.Errorf("key %s: %w", keyFile, err)
			}
			return pair.PrivateKey, nil
		},
	}
}

// Certificate is a certificate that follows its Source. Methods are safe for concurrent use.
type Certificate struct {
	src Source

	mu      sync.Mutex
	cert    *tls.Certificate
	content string    // the source's content in use
	refused string    // the last replacement that could not be used
	retry   time.Time // when to try it again (its key may still be coming)
	checked time.Time // when the source was last read (MinInterval)
	gen     uint64    // rotations so far
	rotated time.Time // when the last rotation was
}

// UnusableError says that a certificate was read but cannot be used, and why.
type UnusableError struct {
	Source string
	Err    error
}

func (e *UnusableError) Error() string { return e.Source + ": " + e.Err.Error() }

func (e *UnusableError) Unwrap() error { return e.Err }

// New reads the certificate once, failing with Read's error if it cannot read it, or an
// *UnusableError if it cannot use it.
func New(src Source) (*Certificate, error) {
	if src.Now == nil {
		src.Now = time.Now
	}
	if src.Logger == nil {
		src.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Certificate{src: src}
	b, err := src.Read()
	if err != nil {
		return nil, err
	}
	if c.cert, err = c.load(b); err != nil {
		return nil, &UnusableError{Source: src.Name, Err: err}
	}
	c.content, c.checked = string(b), src.Now()
	return c, nil
}

// load parses a certificate chain, checks it and finds its key.
func (c *Certificate) load(b []byte) (*tls.Certificate, error) {
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
	if c.src.Check != nil {
		if err := c.src.Check(leaf); err != nil {
			return nil, err
		}
	}
	key, err := c.src.Key(leaf)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}

// Current returns the certificate to use now and its generation, first taking up a
// replacement.
func (c *Certificate) Current() (*tls.Certificate, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.src.Now()
	if c.src.MinInterval > 0 && now.Sub(c.checked) < c.src.MinInterval {
		return c.cert, c.gen
	}
	c.checked = now
	b, err := c.src.Read()
	content := string(b)
	if err != nil || content == c.content || content == c.refused && now.Before(c.retry) {
		return c.cert, c.gen
	}
	cert, err := c.load(b)
	if err != nil {
		if content != c.refused {
			c.src.Logger.Warn("certificate: keeping the current one; its replacement cannot be used", "source", c.src.Name, "error", err)
		}
		c.refused, c.retry = content, now.Add(time.Second)
		return c.cert, c.gen
	}
	c.cert, c.content, c.refused = cert, content, ""
	c.gen++
	c.rotated = now
	c.src.Logger.Info("certificate: rotated", "source", c.src.Name, "subject", cert.Leaf.Subject.String(), "notAfter", cert.Leaf.NotAfter)
	return c.cert, c.gen
}

// Rotation returns the generation and when it began.
func (c *Certificate) Rotation() (uint64, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen, c.rotated
}

// Get returns the current certificate, for options that take a getter.
func (c *Certificate) Get() (*tls.Certificate, error) {
	cert, _ := c.Current()
	return cert, nil
}

// GetCertificate is a tls.Config.GetCertificate.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, _ := c.Current()
	return cert, nil
}

// GetClientCertificate is a tls.Config.GetClientCertificate.
func (c *Certificate) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, _ := c.Current()
	return cert, nil
}

// Watch reads the source every interval until ctx ends, and sends on the returned channel
// after each rotation that follows the call (to close pooled connections that keep the old identity). The
// channel is closed when ctx ends.
func (c *Certificate) Watch(ctx context.Context, interval time.Duration) <-chan struct{} {
	ch := make(chan struct{}, 1)
	_, last := c.Current() // a rotation from now on is signalled
	go func() {
		defer close(ch)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, gen := c.Current(); gen != last {
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
