package verifier

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/testlog"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// published is the ConfigMap in which kube-apiserver publishes its request-header names,
// kubeadm's changed by kv (key, value, ...).
func published(kv ...string) *corev1.ConfigMap {
	d := map[string]string{
		"requestheader-client-ca-file":       "-----BEGIN CERTIFICATE-----",
		"requestheader-username-headers":     `["X-Remote-User"]`,
		"requestheader-group-headers":        `["X-Remote-Group"]`,
		"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
		"requestheader-uid-headers":          `["X-Remote-Uid"]`,
	}
	for i := 0; i < len(kv); i += 2 {
		d[kv[i]] = kv[i+1]
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "extension-apiserver-authentication", Namespace: "kube-system"}, Data: d}
}

// servedProxy is a Proxy serving on loopback in front of a recording upstream.
type servedProxy struct {
	url    string
	client *http.Client
	up     *recordingUpstream
	logs   *testlog.Buffer
	done   chan error
}

func serveProxy(t *testing.T, f *fixture, o ProxyOptions) *servedProxy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "authn.yaml")
	writeConfig(t, path, configYAML(f.ca0, f.ca1))
	servingCA := testpki.NewTestCA(t, "serving CA")
	serving, err := servingCA.IssueServing("proxy", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert := serving.MustTLS(t)
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &servedProxy{url: "https://" + ln.Addr().String(), up: newRecordingUpstream(t), logs: &testlog.Buffer{}, done: make(chan error, 1)}
	o.ConfigFile, o.Listener, o.RequestHeaderRefresh = path, ln, 50*time.Millisecond
	o.Upstream, _ = url.Parse(s.up.URL)
	o.GetServingCertificate = func() (*tls.Certificate, error) { return &cert, nil }
	o.Logger = slog.New(slog.NewTextHandler(s.logs, nil))
	p, err := NewProxy(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() { s.done <- p.Serve(ctx) }()
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: servingCA.Pool(), MinVersion: tls.VersionTLS12}}
	s.client = &http.Client{Transport: transport}
	t.Cleanup(func() {
		cancel()
		transport.CloseIdleConnections()
		select {
		case err := <-s.done:
			_ = err // a test that expects an error from Serve checks it
		case <-time.After(time.Minute):
			t.Error("Serve did not return")
		}
		if t.Failed() {
			t.Logf("proxy logs:\n%s", s.logs.String())
		}
	})
	return s
}

// send posts a request signed with key and leaf at now, with a forged X-Forwarded-Groups
// beside the signature, and returns the status and answer.
func (s *servedProxy) send(t *testing.T, key *ecdsa.PrivateKey, leaf *x509.Certificate, now time.Time) (int, string) {
	t.Helper()
	const path, body = "/api/v1/namespaces/default/configmaps", "{}"
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+path, strings.NewReader(body))
	req.Header = signedHeader(t, key, leaf, now, path, body)
	req.Host = "example.com"
	req.Header.Set("X-Forwarded-Groups", "system:masters")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}

// TestSecurityProxyChecksRequestHeaderNames (issue 27 review of N2, F2): kube-apiserver
// believes every identity header name it is configured with from a front-proxy request;
// the signature proxy removed only X-Remote-*, so where kube-apiserver also read
// X-Forwarded-Groups, a signer's unsigned X-Forwarded-Groups: system:masters made them
// cluster-admin. The Proxy now reads the names kube-apiserver publishes and forwards
// nothing until it has, and found each among those it removes: while the reading fails
// (here: its user may not read the ConfigMap) it answers 503, saying what to grant;
// names it does not remove end Serve with an error naming the flag. Configured with the
// same names, it removes them all and serves.
func TestSecurityProxyChecksRequestHeaderNames(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaf, key := leafFrom(t, f.ca1, "alice", []string{"developers"}, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	wider := published("requestheader-group-headers", `["X-Remote-Group","X-Forwarded-Groups"]`)

	t.Run("default names", func(t *testing.T) {
		t.Parallel()
		client := fake.NewClientset(wider)
		var forbidden atomic.Bool
		forbidden.Store(true)
		client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			if forbidden.Load() {
				return true, nil, apierrors.NewForbidden(corev1.Resource("configmaps"), "extension-apiserver-authentication", errors.New("RBAC: access denied"))
			}
			return false, nil, nil
		})
		s := serveProxy(t, f, ProxyOptions{Client: client})
		if code, answer := s.send(t, key, leaf, time.Now()); code != http.StatusServiceUnavailable || !strings.Contains(answer, notChecked) {
			t.Errorf("before the names are read: %d %s; want 503 %q", code, answer, notChecked)
		}
		poll.Until(t, "a warning saying what to grant", func() bool {
			return strings.Contains(s.logs.String(), "the user kplug-signature-proxy, which the proxy asserts in X-Remote-User with its front-proxy client certificate, may not get ConfigMap kube-system/extension-apiserver-authentication: bind it to the Role extension-apiserver-authentication-reader in kube-system (docs/signature-proxy-rbac.yaml)")
		})
		if code, answer := s.send(t, key, leaf, time.Now()); code != http.StatusServiceUnavailable || !strings.Contains(answer, notChecked) {
			t.Errorf("while the names cannot be read: %d %s; want 503 %q", code, answer, notChecked)
		}
		forbidden.Store(false)
		select {
		case err := <-s.done:
			s.done <- err // for the cleanup
			const want = "verifier: the request-header names in ConfigMap kube-system/extension-apiserver-authentication have --requestheader-group-headers=X-Remote-Group,X-Forwarded-Groups, but kplug signature-proxy sets and removes only X-Remote-Group: a client could assert any identity through X-Forwarded-Groups if kube-apiserver reads it."
			if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "; or run kplug signature-proxy with --requestheader-group-headers=X-Remote-Group,X-Forwarded-Groups, so that it removes them all") {
				t.Errorf("Serve: %v\nwant %q...", err, want)
			}
		case <-time.After(time.Minute):
			t.Fatal("Serve goes on beside a kube-apiserver that reads X-Forwarded-Groups")
		}
		if got := s.up.requests(); len(got) != 0 {
			t.Errorf("the upstream received X-Forwarded-Groups %q, X-Remote-Group %q", got[0].header.Values("X-Forwarded-Groups"), got[0].header.Values("X-Remote-Group"))
		}
	})

	t.Run("the same names configured", func(t *testing.T) {
		t.Parallel()
		names := DefaultRequestHeaders
		names.Group = []string{"X-Remote-Group", "X-Forwarded-Groups"}
		s := serveProxy(t, f, ProxyOptions{Client: fake.NewClientset(wider), Headers: names})
		poll.Until(t, "the proxy to forward", func() bool {
			code, _ := s.send(t, key, leaf, time.Now())
			return code == http.StatusOK
		})
		got := s.up.requests()
		if g := got[len(got)-1].header; g.Get("X-Forwarded-Groups") != "" || strings.Join(g.Values("X-Remote-Group"), ",") != "developers" {
			t.Errorf("upstream got X-Forwarded-Groups %q, X-Remote-Group %q; want none and developers", g.Values("X-Forwarded-Groups"), g.Values("X-Remote-Group"))
		}
	})
}

// TestProxyKeepsForwardingWhileKubeAPIServerStarts: a kube-apiserver that is restarting
// refuses everyone (403) until its authorizer has synced, the proxy's reading of the
// request-header names included. Like peerproxy, the Proxy then asks /readyz: while it is
// not ok the last good reading holds and the Proxy goes on forwarding; a refusal from a
// ready kube-apiserver closes the gate (503).
func TestProxyKeepsForwardingWhileKubeAPIServerStarts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaf, key := leafFrom(t, f.ca1, "alice", []string{"developers"}, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	client := fake.NewClientset(published())
	var forbidden atomic.Bool
	client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if forbidden.Load() {
			return true, nil, apierrors.NewForbidden(corev1.Resource("configmaps"), "extension-apiserver-authentication", errors.New("RBAC: not yet synced"))
		}
		return false, nil, nil
	})
	s := serveProxy(t, f, ProxyOptions{Client: client})
	poll.Until(t, "the proxy to forward", func() bool {
		code, _ := s.send(t, key, leaf, time.Now())
		return code == http.StatusOK
	})

	s.up.notReady.Store(true)
	forbidden.Store(true)
	poll.Until(t, "a warning that kube-apiserver is starting", func() bool {
		return strings.Contains(s.logs.String(), "kube-apiserver is starting (its /readyz is not ok)")
	})
	if code, answer := s.send(t, key, leaf, time.Now()); code != http.StatusOK {
		t.Errorf("while kube-apiserver starts: %d %s; want 200", code, answer)
	}

	s.up.notReady.Store(false)
	poll.Until(t, "503 once a ready kube-apiserver refuses the reading", func() bool {
		code, _ := s.send(t, key, leaf, time.Now())
		return code == http.StatusServiceUnavailable
	})
}
