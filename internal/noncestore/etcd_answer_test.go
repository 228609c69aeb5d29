package noncestore

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestEtcdAnswersThatAreNoTransaction (issue 33 review 2, E2 and E3): an answer that is
// not a transaction's (an empty object, an error object with 200) is an outage, never a
// replay; a redirect is not followed (it could lead to plain http on any host).
func TestEtcdAnswersThatAreNoTransaction(t *testing.T) {
	for _, tt := range []struct {
		name, txn string
		redirect  bool
		wantErr   string
	}{
		{name: "an empty object", txn: `{}`, wantErr: "not a transaction's"},
		{name: "an error object with 200", txn: `{"error":"etcdserver: request timed out","code":14}`, wantErr: "not a transaction's"},
		{name: "a redirect", redirect: true, wantErr: "answered 307 Temporary Redirect"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte(`{"header":{"revision":"2"},"succeeded":true,"ID":"7"}`))
			}))
			defer elsewhere.Close()
			gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case tt.redirect:
					http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
				case r.URL.Path == "/v3/lease/grant":
					_, _ = w.Write([]byte(`{"header":{"revision":"1"},"ID":"7","TTL":"60"}`))
				default:
					_, _ = w.Write([]byte(tt.txn))
				}
			}))
			defer gw.Close()
			e, err := DialEtcd(t.Context(), []string{gw.URL}, "", 2*time.Second, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ok, reason, err := e.Consume(t.Context(), "k", "n", time.Now().Add(time.Minute))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Consume = %v, %q, %v; want an error with %q (an outage, not a replay)", ok, reason, err, tt.wantErr)
			}
		})
	}
}
