// Package imagekit runs, in process, what image pulls with KEP-4412 credentials need
// around a real control plane: an OCI registry (distribution/v3) that requires htpasswd
// users, and an OAuth 2.0 Token Exchange (RFC 8693) endpoint that trades a service-account
// token, verified with TokenReview against the apiserver, for a registry password. The
// end-to-end tests and `make demo` use them.
package imagekit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/bcrypt"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	// The registry's htpasswd authentication and in-memory storage register themselves.
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

// Registry is an in-memory OCI registry on loopback with two htpasswd users, "pusher"
// and "puller", with random passwords. It is safe for concurrent use.
type Registry struct {
	Host           string // 127.0.0.1:PORT, plain HTTP
	PusherPassword string
	PullerPassword string

	srv       *httptest.Server
	mu        sync.Mutex
	passwords map[string]bool // every basic-auth password a client sent
}

// StartRegistry serves a registry until Close; dir holds its htpasswd file.
func StartRegistry(dir string) (*Registry, error) {
	r := &Registry{PusherPassword: randomString(), PullerPassword: randomString(), passwords: map[string]bool{}}
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
		Auth: configuration.Auth{"htpasswd": configuration.Parameters{"realm": "kplug-e2e", "path": file}},
	}
	cfg.Log.AccessLog.Disabled = true
	// The registry logs every request, and every 404 a client's HEAD gets, through
	// logrus's standard logger (NewApp does not apply cfg.Log); clients see its errors.
	logrus.SetOutput(io.Discard)
	app := handlers.NewApp(context.Background(), cfg)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, pw, ok := req.BasicAuth(); ok {
			r.mu.Lock()
			r.passwords[pw] = true
			r.mu.Unlock()
		}
		app.ServeHTTP(w, req)
	}))
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r, nil
}

// Close stops the registry.
func (r *Registry) Close() { r.srv.Close() }

// SawPassword reports whether a client sent password to the registry.
func (r *Registry) SawPassword(password string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.passwords[password]
}

// PushRandom pushes a small random image to ref as "pusher" and returns its digest.
func (r *Registry) PushRandom(ctx context.Context, ref string) (v1.Hash, error) {
	img, err := random.Image(512, 2)
	if err != nil {
		return v1.Hash{}, err
	}
	tag, err := name.ParseReference(ref)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithAuth(&authn.Basic{Username: "pusher", Password: r.PusherPassword})); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", ref, err)
	}
	return img.Digest()
}

// TokenExchange is an RFC 8693 token endpoint that accepts service-account tokens for
// Audience (checked with TokenReview) and issues Password as the access token. It is safe
// for concurrent use.
type TokenExchange struct {
	URL      string
	Audience string

	srv   *httptest.Server
	mu    sync.Mutex
	calls []ExchangeCall
}

// ExchangeCall is one successful exchange: the subject token, the user TokenReview said
// it was, and the audience parameter.
type ExchangeCall struct{ Subject, User, Audience string }

// StartTokenExchange serves the endpoint until Close; client makes the TokenReviews.
func StartTokenExchange(client kubernetes.Interface, audience, password string) *TokenExchange {
	te := &TokenExchange{Audience: audience}
	te.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange" ||
			r.FormValue("subject_token_type") != "urn:ietf:params:oauth:token-type:jwt" {
			oauthError(w, "unsupported_grant_type")
			return
		}
		review, err := client.AuthenticationV1().TokenReviews().Create(r.Context(), &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: r.FormValue("subject_token"), Audiences: []string{audience}},
		}, metav1.CreateOptions{})
		if err != nil || !review.Status.Authenticated {
			oauthError(w, "invalid_grant")
			return
		}
		te.mu.Lock()
		te.calls = append(te.calls, ExchangeCall{r.FormValue("subject_token"), review.Status.User.Username, r.FormValue("audience")})
		te.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{
			"access_token": password, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
			"token_type": "Bearer", "expires_in": 600,
		})
	}))
	te.URL = te.srv.URL
	return te
}

// Close stops the endpoint.
func (te *TokenExchange) Close() { te.srv.Close() }

// Calls returns the successful exchanges so far.
func (te *TokenExchange) Calls() []ExchangeCall {
	te.mu.Lock()
	defer te.mu.Unlock()
	return append([]ExchangeCall(nil), te.calls...)
}

func oauthError(w http.ResponseWriter, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = fmt.Fprintf(w, `{"error":%q}`, code)
}

func randomString() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}
