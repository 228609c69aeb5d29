// Package registrytest is the one OCI registry of kplug's tests: a distribution/v3 registry
// served in-process on loopback, with htpasswd authentication and in-memory storage, so
// that image credential tests pull from a real registry that checks the credentials
// kplug found. It also records every basic-auth password a client sent, so that a test
// can show a secret never reached the wrong registry. StartTokenExchange serves the other
// half of a KEP-4412 pull: an OAuth 2.0 Token Exchange (RFC 8693) endpoint that trades a
// service-account token, checked with TokenReview against the apiserver, for the puller's
// password. New and StartTokenExchange also serve programs that are not tests (make demo).
package registrytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/bcrypt"

	// The registry's htpasswd authentication and in-memory storage register themselves.
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

// Registry is a running registry with two users: "pusher" and "puller", each with a random
// password. Its methods are safe for concurrent use.
type Registry struct {
	// Host is where it listens, 127.0.0.1:PORT, plain HTTP: clients must be told the
	// registry is insecure (name.Insecure, --tls-verify=false, --insecure).
	Host           string
	PusherPassword string
	PullerPassword string

	srv       *httptest.Server
	requests  atomic.Int64
	mu        sync.Mutex
	passwords map[string]bool      // every basic-auth password a client sent
	aliases   map[authn.Basic]bool // AddUser's, let in as puller
}

// Start serves a registry until the end of the test.
func Start(t testing.TB) *Registry {
	t.Helper()
	r, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// New serves a registry until Close, for programs that are not tests (make demo); dir
// holds its htpasswd file.
func New(dir string) (*Registry, error) {
	r := &Registry{passwords: map[string]bool{}, aliases: map[authn.Basic]bool{}}
	for _, pw := range []*string{&r.PusherPassword, &r.PullerPassword} {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		*pw = hex.EncodeToString(b)
	}
	var htpasswd strings.Builder
	for user, pw := range map[string]string{"pusher": r.PusherPassword, "puller": r.PullerPassword} {
		hash, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&htpasswd, "%s:%s\n", user, hash)
	}
	file := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(file, []byte(htpasswd.String()), 0o600); err != nil {
		return nil, err
	}
	cfg := &configuration.Configuration{
		Storage: configuration.Storage{
			"inmemory":    configuration.Parameters{},
			"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
		},
		Auth: configuration.Auth{"htpasswd": configuration.Parameters{"realm": "kplug-test", "path": file}},
	}
	cfg.Log.AccessLog.Disabled = true
	// The registry logs every request (and every unauthenticated ping, as a warning)
	// through logrus's standard logger.
	logrus.SetLevel(logrus.ErrorLevel)
	app := handlers.NewApp(context.Background(), cfg)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		if user, pw, ok := req.BasicAuth(); ok {
			r.mu.Lock()
			r.passwords[pw] = true
			if r.aliases[authn.Basic{Username: user, Password: pw}] {
				req.SetBasicAuth("puller", r.PullerPassword)
			}
			r.mu.Unlock()
		}
		app.ServeHTTP(w, req)
	}))
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r, nil
}

// AddUser lets user, with password, pull as puller: for a provider whose answer is fixed
// (a fake of a cloud's plugin), so that the registry accepts exactly what it returns.
// (htpasswd cannot hold such passwords: bcrypt takes at most 72 bytes.)
func (r *Registry) AddUser(user, password string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.aliases[authn.Basic{Username: user, Password: password}] = true
}

// Close stops the registry.
func (r *Registry) Close() { r.srv.Close() }

// SawPassword reports whether a client sent password to the registry.
func (r *Registry) SawPassword(password string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.passwords[password]
}

// Requests is how many HTTP requests the registry has served.
func (r *Registry) Requests() int64 { return r.requests.Load() }

// Puller is the puller's username and password, for a provider plugin to answer with.
func (r *Registry) Puller() authn.Basic {
	return authn.Basic{Username: "puller", Password: r.PullerPassword}
}

// Push writes a random image of layers layers of size bytes each under ref (a reference
// on this registry, "HOST/team/app:v1") as pusher, and returns its digest.
func (r *Registry) Push(t testing.TB, ref string, size int64, layers int64) ggcrv1.Hash {
	t.Helper()
	d, err := r.PushRandom(context.Background(), ref, size, layers)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// PushRandom is Push for programs that are not tests.
func (r *Registry) PushRandom(ctx context.Context, ref string, size int64, layers int64) (ggcrv1.Hash, error) {
	img, err := random.Image(size, layers)
	if err != nil {
		return ggcrv1.Hash{}, err
	}
	if err := r.PushImage(ctx, ref, img); err != nil {
		return ggcrv1.Hash{}, err
	}
	return img.Digest()
}

// PushImage writes img under ref (a reference on this registry) as pusher.
func (r *Registry) PushImage(ctx context.Context, ref string, img ggcrv1.Image) error {
	tag, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithAuth(&authn.Basic{Username: "pusher", Password: r.PusherPassword})); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// RandomString is 32 random hex digits: a password nobody guesses.
func RandomString(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
