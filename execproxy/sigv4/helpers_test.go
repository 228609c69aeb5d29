package sigv4_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// modifying sends each request through modify before base, as the exec proxy's upstream
// transport does; tamper, if set, then changes the signed request the way a hostile
// intermediary would.
type modifying struct {
	modify func(*http.Request) error
	tamper func(*http.Request)
	base   http.RoundTripper
}

func (m modifying) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if err := m.modify(req); err != nil {
		return nil, err
	}
	if m.tamper != nil {
		m.tamper(req)
	}
	return m.base.RoundTrip(req)
}

// verifyingServer answers 200 "ok" when verify accepts a request and 401 with the reason
// when it does not.
func verifyingServer(t *testing.T, verify func(r *http.Request, body []byte) error) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			err = verify(r, body)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// send makes one request through c and returns the verifier's verdict.
func send(t *testing.T, c *http.Client, method, url string, body string, header http.Header) (string, error) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), nil
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func readCloser(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }
