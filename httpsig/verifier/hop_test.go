package verifier

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// signedFront is a Handler with the fixture's authenticator in front of a recording
// upstream.
func signedFront(t *testing.T, f *fixture) (*httptest.Server, *recordingUpstream) {
	t.Helper()
	up := newRecordingUpstream(t)
	target, _ := url.Parse(up.URL)
	h, err := NewHandler(HandlerOptions{Authenticator: f.auth, Upstream: target})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return front, up
}

func wantBadRequest(t *testing.T, code int, answer []byte, want string) {
	t.Helper()
	var s metav1.Status
	_ = json.Unmarshal(answer, &s)
	if code != http.StatusBadRequest || s.Reason != metav1.StatusReasonBadRequest || s.Message != want {
		t.Errorf("%d %s; want 400 %q", code, answer, want)
	}
}

// TestSecurityImpersonationLinesCannotBeMergedOrSplit (issue 27 review of N2, F6): a
// signature covers Impersonate-Group's lines joined with ", ", and kube-apiserver reads
// them line by line. The signed lines "viewers" and "auditors", merged by an intermediary
// into the one line "viewers, auditors", still verify, and were forwarded: kube-apiserver
// then acted with the one group "viewers, auditors". A signed value with a comma, split
// into lines, changes meaning the other way. The proxy refuses, before verifying, any
// impersonation value with a comma and a second Impersonate-User or Impersonate-Uid line,
// so the lines that arrive are the signed value split at ", ", and nothing is forwarded.
func TestSecurityImpersonationLinesCannotBeMergedOrSplit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaf, key := leafFrom(t, f.ca1, "alice", []string{"developers"}, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	const comma = `" holds a comma: a signature covers the lines of a field joined with ", ", and kube-apiserver reads impersonation headers line by line, so lines could be merged or split without breaking the signature; send each value on a line of its own, with no comma in it`
	for _, tc := range []struct {
		name   string
		tamper func(*http.Request)
		want   string
	}{
		{"group lines merged", func(r *http.Request) { r.Header["Impersonate-Group"] = []string{"viewers, auditors"} },
			`signature proxy: the Impersonate-Group value "viewers, auditors` + comma},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			front, up := signedFront(t, f)
			_, code, answer := signedSend(t, front.URL, key, leaf, f.now, nil, tc.tamper)
			wantBadRequest(t, code, answer, tc.want)
			if got := up.requests(); len(got) != 0 {
				t.Errorf("the upstream received %v", got[0].header)
			}
		})
	}
	// kplug's signer does not sign a value with a comma, so a signed one to split is
	// made by others; the refusal comes before verification.
	t.Run("user split, before verifying", func(t *testing.T) {
		t.Parallel()
		auth := &fakeAuth{user: alice}
		up := newUpstream(t, nil)
		front := newFrontend(t, auth, up)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, front.URL+"/api", nil)
		req.Header["Impersonate-User"] = []string{"viewer", "kplug-admin"}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		wantBadRequest(t, resp.StatusCode, answer, "signature proxy: the request has 2 Impersonate-User lines, and kube-apiserver reads the first only: send one")
		auth.mu.Lock()
		defer auth.mu.Unlock()
		if auth.saw != nil || len(up.requests()) != 0 {
			t.Errorf("verified %v, forwarded %d", auth.saw, len(up.requests()))
		}
	})
	t.Run("lines as signed", func(t *testing.T) {
		t.Parallel()
		front, up := signedFront(t, f)
		_, code, answer := signedSend(t, front.URL, key, leaf, f.now, nil, nil)
		got := up.requests()
		if code != http.StatusOK || len(got) != 1 {
			t.Fatalf("%d %s, %d requests upstream", code, answer, len(got))
		}
		if diff := cmp.Diff([]string{"viewers", "auditors"}, got[0].header.Values("Impersonate-Group")); diff != "" {
			t.Errorf("Impersonate-Group upstream (-want +got):\n%s", diff)
		}
	})
}

// TestSecurityUpstreamLearnsTheClientAddress (issue 27 review of N2, F7): kube-apiserver
// reads a request's audit sourceIPs from X-Forwarded-For, then X-Real-Ip, then the peer
// address, which behind the proxy is the proxy's. A client's X-Real-Ip: 6.6.6.6 used to
// pass on, and X-Forwarded-For was removed but never set, so the audit log named the
// address the client chose and never the client. Upstream now gets X-Forwarded-For with
// the client's address alone, and neither X-Real-Ip nor Forwarded.
func TestSecurityUpstreamLearnsTheClientAddress(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaf, key := leafFrom(t, f.ca1, "alice", []string{"developers"}, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	front, up := signedFront(t, f)
	_, code, answer := signedSend(t, front.URL, key, leaf, f.now, nil, func(r *http.Request) {
		r.Header.Set("X-Real-Ip", "6.6.6.6")
		r.Header.Set("X-Forwarded-For", "7.7.7.7")
		r.Header.Set("Forwarded", "for=8.8.8.8")
		r.Header.Set("X-Forwarded-Host", "evil.example")
	})
	got := up.requests()
	if code != http.StatusOK || len(got) != 1 {
		t.Fatalf("%d %s, %d requests upstream", code, answer, len(got))
	}
	h := got[0].header
	want := http.Header{"X-Forwarded-For": {"127.0.0.1"}} // httptest's client and server are on loopback
	have := http.Header{}
	for _, name := range []string{"X-Forwarded-For", "X-Real-Ip", "Forwarded", "X-Forwarded-Host"} {
		if vs := h.Values(name); len(vs) > 0 {
			have[name] = vs
		}
	}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("forwarding fields upstream (-want +got):\n%s", diff)
	}
}

// TestSecurityTrailersNeverReachUpstream (issue 27 review of N2, F9): trailers come after
// the body, and no signature covers them; Impersonate-User and X-Remote-User trailers used
// to be forwarded after verification. A request that declares trailers is refused 400
// before verification; trailers sent without a declaration are dropped.
func TestSecurityTrailersNeverReachUpstream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaf, key := leafFrom(t, f.ca1, "alice", []string{"developers"}, f.now.Add(-time.Hour), f.now.Add(time.Hour))

	t.Run("declared", func(t *testing.T) {
		t.Parallel()
		front, up := signedFront(t, f)
		_, code, answer := signedSend(t, front.URL, key, leaf, f.now, nil, func(r *http.Request) {
			r.ContentLength = -1 // chunked, so that the trailers are sent
			r.Trailer = http.Header{"Impersonate-User": {"kplug-admin"}, "X-Remote-User": {"kplug-admin"}}
		})
		wantBadRequest(t, code, answer, "signature proxy: the request declares trailers (Trailer header), which no signature covers: send it without trailers")
		if got := up.requests(); len(got) != 0 {
			t.Errorf("the upstream received %v", got[0].header)
		}
	})
	t.Run("undeclared", func(t *testing.T) {
		t.Parallel()
		var (
			mu       sync.Mutex
			trailers []http.Header
		)
		upstream := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			trailers = append(trailers, r.Trailer)
			mu.Unlock()
		}))
		t.Cleanup(upstream.Close)
		target, _ := url.Parse(upstream.URL)
		h, err := NewHandler(HandlerOptions{Authenticator: f.auth, Upstream: target})
		if err != nil {
			t.Fatal(err)
		}
		front := httptest.NewServer(h)
		t.Cleanup(front.Close)
		const body = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"signed"}}`
		hdr := signedHeader(t, key, leaf, f.now, "/api/v1/namespaces/default/configmaps", body)
		conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", front.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var b strings.Builder
		fmt.Fprintf(&b, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n")
		_ = hdr.Write(&b)
		fmt.Fprintf(&b, "\r\n%x\r\n%s\r\n0\r\nImpersonate-User: kplug-admin\r\nX-Remote-User: kplug-admin\r\n\r\n", len(body), body)
		if _, err := io.WriteString(conn, b.String()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		if resp.StatusCode != http.StatusOK || len(trailers) != 1 {
			t.Fatalf("%d %s, %d requests upstream", resp.StatusCode, answer, len(trailers))
		}
		if len(trailers[0]) != 0 {
			t.Errorf("the upstream received trailers %v", trailers[0])
		}
	})
}
