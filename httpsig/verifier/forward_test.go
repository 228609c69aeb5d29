package verifier

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/reverseproxy"
)

// received is a request as an upstream received it.
type received struct {
	method, requestURI string
	header             http.Header
	body               []byte
}

// recordingUpstream records every request it receives, body included, and answers 200;
// /readyz it answers 500 while notReady is set, as a kube-apiserver that is starting.
type recordingUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	seen     []received
	notReady atomic.Bool
}

func newRecordingUpstream(t *testing.T) *recordingUpstream {
	t.Helper()
	u := &recordingUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, received{method: r.Method, requestURI: r.RequestURI, header: r.Header.Clone(), body: body})
		u.mu.Unlock()
		if r.URL.Path == "/readyz" && u.notReady.Load() {
			http.Error(w, "[-]poststarthook/rbac/bootstrap-roles failed: not finished", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	reverseproxy.LimitHeaders(u.Config, reverseproxy.MaxHeaderBytes) // kube-apiserver's, not Go's
	u.Start()
	t.Cleanup(u.Close)
	return u
}

func (u *recordingUpstream) requests() []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]received(nil), u.seen...)
}

// signedSend signs a request with key and cert, covering extra beside what the profile
// covers, lets tamper change it as an intermediary would, sends it to front and returns
// the request as it left the client (with its body) and the answer's status and body.
func signedSend(t *testing.T, front string, key *ecdsa.PrivateKey, cert *x509.Certificate, now time.Time, extra map[string]string, tamper func(*http.Request)) (received, int, []byte) {
	t.Helper()
	headers := map[string]string{httpsig.AudienceHeader: "https://cluster.example"}
	for k, v := range extra {
		headers[k] = v
	}
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{Key: httpsig.Key{Signer: key, Certificate: cert}, Headers: headers, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	var sent received
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: signer.RoundTripper(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if tamper != nil {
			tamper(r)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		sent = received{method: r.Method, requestURI: r.URL.RequestURI(), header: r.Header.Clone(), body: body}
		return transport.RoundTrip(r)
	}))}
	const body = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"signed"},"data":{"k":"v"}}`
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, front+"/api/v1/namespaces/default/configmaps?dryRun=All&fieldManager=kubectl-create", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, */*")
	req.Header.Set("User-Agent", "kubectl/v1.36.3 (linux/amd64) kubernetes/abcdef")
	req.Header.Set("Audit-Id", "5f1c9a7e-0000-4000-8000-000000000001")
	req.Header.Set("Impersonate-User", "viewer")
	req.Header.Add("Impersonate-Group", "viewers")
	req.Header.Add("Impersonate-Group", "auditors") // two lines, which must stay two
	req.Header.Set("Impersonate-Uid", "1234")
	req.Header.Set("Impersonate-Extra-Scopes", "view")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return sent, resp.StatusCode, answer
}

// covered is every field the signatures of a request as sent cover (the signature fields
// themselves aside, which the proxy consumes).
func covered(t *testing.T, h http.Header) []string {
	t.Helper()
	d, err := httpsfv.UnmarshalDictionary(h.Values("Signature-Input"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, label := range d.Names() {
		m, _ := d.Get(label)
		for _, it := range m.(httpsfv.InnerList).Items {
			c := it.Value.(string)
			if !strings.HasPrefix(c, "@") && !strings.HasPrefix(c, "signature") {
				names = append(names, c)
			}
		}
	}
	return names
}

// TestSecurityUpstreamReceivesWhatWasVerified (issue 27, N2): a signed request reaches the
// upstream with every covered field byte for byte (impersonation headers, one of them in
// two lines, Content-Type, Audit-Id, X-K8s-Audience, Accept, User-Agent, Content-Digest),
// with its method, target and body as signed. A client or intermediary that names
// covered fields in Connection, which forwarding would drop after the check, is refused
// 400 before verification; a covered field that forwarding removes or rewrites on its own
// (a hop-by-hop or forwarding field) is refused 400 at the last step before the wire. In
// neither case does anything reach the upstream.
func TestSecurityUpstreamReceivesWhatWasVerified(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaf, key := leafFrom(t, f.ca1, "alice", []string{"developers"}, f.now.Add(-time.Hour), f.now.Add(time.Hour))

	for _, tc := range []struct {
		name   string
		extra  map[string]string // covered beside the profile's fields
		tamper func(*http.Request)
		want   string // the 400's message; "" forwards
	}{
		{name: "as signed", tamper: func(r *http.Request) { r.Header.Set("Connection", "keep-alive") }},
		{name: "Connection names the impersonation", tamper: func(r *http.Request) { r.Header.Set("Connection", "Impersonate-User, Impersonate-Group") },
			want: `signature proxy: the Connection header names "Impersonate-User": only close, keep-alive and upgrade are accepted, because a proxy removes every field that Connection names before it forwards the request`},
		{name: "Connection names other covered fields, in a second line", tamper: func(r *http.Request) {
			r.Header.Add("Connection", "keep-alive")
			r.Header.Add("Connection", "content-type, Audit-Id,X-K8s-Audience, impersonate-extra-scopes")
		}, want: `signature proxy: the Connection header names "content-type": only close, keep-alive and upgrade are accepted, because a proxy removes every field that Connection names before it forwards the request`},
		{name: "covered TE that forwarding rewrites", extra: map[string]string{"TE": "trailers, deflate"},
			want: "signature proxy: the signed field te would not reach kube-apiserver as it was signed (a proxy removes or rewrites it): send the request without covering it"},
		// Issue 33 item 4: the handler takes every label's components from the
		// authenticator's one parse, the refused labels' too.
		{name: "TE covered by a signature that was not accepted", tamper: func(r *http.Request) {
			r.Header.Set("TE", "trailers, deflate")
			r.Header.Set("Signature-Input", `sig0=("te");created=1;keyid="k";alg="ed25519";tag="kubernetes";nonce="n", `+r.Header.Get("Signature-Input"))
			r.Header.Set("Signature", `sig0=:AAAA:, `+r.Header.Get("Signature"))
		}, want: "signature proxy: the signed field te would not reach kube-apiserver as it was signed (a proxy removes or rewrites it): send the request without covering it"},
		{name: "covered Keep-Alive", extra: map[string]string{"Keep-Alive": "timeout=5"},
			want: "signature proxy: the signed field keep-alive would not reach kube-apiserver as it was signed (a proxy removes or rewrites it): send the request without covering it"},
		{name: "covered Upgrade without Connection: upgrade", extra: map[string]string{"Upgrade": "websocket"},
			want: "signature proxy: the signed field upgrade would not reach kube-apiserver as it was signed (a proxy removes or rewrites it): send the request without covering it"},
		{name: "covered Proxy-Connection", extra: map[string]string{"Proxy-Connection": "keep-alive"},
			want: "signature proxy: the signed field proxy-connection would not reach kube-apiserver as it was signed (a proxy removes or rewrites it): send the request without covering it"},
		{name: "covered X-Forwarded-For", extra: map[string]string{"X-Forwarded-For": "10.0.0.7"},
			want: "signature proxy: the signed field x-forwarded-for would not reach kube-apiserver as it was signed (a proxy removes or rewrites it): send the request without covering it"},
		{name: "covered Forwarded", extra: map[string]string{"Forwarded": "for=10.0.0.7"},
			want: "signature proxy: the signed field forwarded would not reach kube-apiserver as it was signed (a proxy removes or rewrites it): send the request without covering it"},
		{name: "covered X-Real-Ip", extra: map[string]string{"X-Real-Ip": "10.0.0.7"},
			want: "signature proxy: the signed field x-real-ip would not reach kube-apiserver as it was signed (a proxy removes or rewrites it): send the request without covering it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newRecordingUpstream(t)
			target, _ := url.Parse(up.URL)
			h, err := NewHandler(HandlerOptions{Authenticator: f.auth, Upstream: target})
			if err != nil {
				t.Fatal(err)
			}
			front := httptest.NewServer(h)
			t.Cleanup(front.Close)
			sent, code, answer := signedSend(t, front.URL, key, leaf, f.now, tc.extra, tc.tamper)
			got := up.requests()
			if tc.want != "" {
				var s metav1.Status
				_ = json.Unmarshal(answer, &s)
				if code != http.StatusBadRequest || s.Reason != metav1.StatusReasonBadRequest || s.Message != tc.want {
					t.Errorf("%d %s; want 400 %q", code, answer, tc.want)
				}
				if len(got) != 0 {
					t.Errorf("the upstream received %d requests: %v", len(got), got[0].header)
				}
				return
			}
			if code != http.StatusOK || len(got) != 1 {
				t.Fatalf("%d %s, %d requests upstream", code, answer, len(got))
			}
			in := got[0]
			names := covered(t, sent.header)
			for _, want := range []string{"impersonate-user", "impersonate-group", "impersonate-uid", "impersonate-extra-scopes", "content-type", "audit-id", "x-k8s-audience", "accept", "user-agent", "content-digest"} {
				if !slices.Contains(names, want) {
					t.Errorf("the signature does not cover %s: the test proves less than it says", want)
				}
			}
			for _, name := range names {
				if diff := cmp.Diff(sent.header.Values(name), in.header.Values(name)); diff != "" {
					t.Errorf("covered %s (-signed +upstream):\n%s", name, diff)
				}
			}
			if in.method != sent.method || in.requestURI != sent.requestURI || !bytes.Equal(in.body, sent.body) {
				t.Errorf("upstream got %s %s %q, signed %s %s %q", in.method, in.requestURI, in.body, sent.method, sent.requestURI, sent.body)
			}
			if in.header.Get("X-Remote-User") != "cert:alice" {
				t.Errorf("upstream identity %q", in.header.Get("X-Remote-User"))
			}
		})
	}
}

// TestVerifiedCheck: the comparison of an outgoing request with what was verified, for
// what the end-to-end test above does not reach: the request target under Upstream's path,
// and the fields the transport writes on its own (User-Agent, Content-Length).
func TestVerifiedCheck(t *testing.T) {
	t.Parallel()
	in := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/api/v1/namespaces/a%2Fb/configmaps?labelSelector=a%3Db", strings.NewReader("{}"))
	in.Header.Set("Signature-Input", `sig1=("@method" "@path" "user-agent" "content-length" "x-custom");keyid="k"`)
	in.Header.Set("User-Agent", "kubectl")
	in.Header.Set("Content-Length", "2")
	in.Header.Add("X-Custom", "a")
	in.Header.Add("X-Custom", "b")
	v, err := newVerified(in, alice, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		prefix string
		change func(*http.Request)
		want   string // the component refused; "" for none
	}{
		{name: "as verified"},
		{name: "under Upstream's path", prefix: "/k8s/", change: func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/k8s"+r.URL.Path, "/k8s"+r.URL.RawPath }},
		{name: "method", change: func(r *http.Request) { r.Method = http.MethodPut }, want: "@method"},
		{name: "path decoded", change: func(r *http.Request) { r.URL.RawPath = "" }, want: "@path"},
		{name: "query re-encoded", change: func(r *http.Request) { r.URL.RawQuery = "labelSelector=a=b" }, want: "@query"},
		{name: "lines joined", change: func(r *http.Request) { r.Header.Set("X-Custom", "a, b") }, want: "x-custom"},
		{name: "lines reordered", change: func(r *http.Request) { r.Header["X-Custom"] = []string{"b", "a"} }, want: "x-custom"},
		{name: "a second User-Agent line, which the transport drops", change: func(r *http.Request) { r.Header.Add("User-Agent", "evil") }, want: ""},
		{name: "User-Agent emptied", change: func(r *http.Request) { r.Header.Set("User-Agent", "") }, want: "user-agent"},
		{name: "another length", change: func(r *http.Request) { r.ContentLength = 3 }, want: "content-length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := in.Clone(t.Context())
			out.URL.Scheme, out.URL.Host = "https", "upstream.example"
			if tc.change != nil {
				tc.change(out)
			}
			got := ""
			if err := v.check(out, tc.prefix); err != nil {
				var ae *AlteredError
				if !errors.As(err, &ae) {
					t.Fatalf("%v is not an *AlteredError", err)
				}
				got = ae.Component
			}
			if got != tc.want {
				t.Errorf("refused %q, want %q", got, tc.want)
			}
		})
	}
}
