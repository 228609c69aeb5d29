package registrytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

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
