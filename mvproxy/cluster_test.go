package mvproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A test double of kube-apiserver for unit tests: it serves the discovery documents it
// is given, authenticates front-proxy headers (behind a front-proxy CA certificate) and
// bearer tokens, and answers each resource request with who it saw. Streaming and
// upgrades have endpoints of their own. The end-to-end tests use the real kube-apiserver.
type backend struct {
	name          string
	doc           *Document
	frontProxyCAs *x509.CertPool
	tokens        map[string]string
	srv           *httptest.Server
	watchStep     chan struct{} // a watch sends its second event after a receive from here
}

// seen is what a backend answers to a resource request.
type seen struct {
	Server  string   `json:"server"`
	User    string   `json:"user"`
	Groups  []string `json:"groups"`
	Proxied string   `json:"proxied"`
	Token   bool     `json:"token"`
	Remote  bool     `json:"remoteHeaders"`
	Body    string   `json:"body"`
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, groups := b.authenticate(r)
	switch r.URL.Path {
	case "/apis", "/api":
		l := b.doc.Groups
		if r.URL.Path == "/api" {
			l = b.doc.Core
		}
		body, etag, _ := encodeDiscovery(l)
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", AcceptAggregated)
		_, _ = w.Write(body)
		return
	}
	gvr, ok := ResourceOf(r.URL.Path)
	if !ok || !b.doc.Serves(gvr) {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", 0)
		return
	}
	switch {
	case r.Header.Get("Upgrade") == "test-echo":
		b.echo(w)
	case r.URL.Query().Get("watch") == "true":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"type\":\"ADDED\",\"server\":%q}\n", b.name)
		w.(http.Flusher).Flush()
		select {
		case <-b.watchStep:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, "{\"type\":\"MODIFIED\",\"server\":%q}\n", b.name)
	default:
		body, _ := io.ReadAll(r.Body)
		_ = json.NewEncoder(w).Encode(seen{
			Server: b.name, User: user, Groups: groups, Proxied: r.Header.Get(ProxiedHeader),
			Token: r.Header.Get("Authorization") != "", Remote: r.Header.Get(remoteUser) != "", Body: string(body),
		})
	}
}

func (b *backend) authenticate(r *http.Request) (string, []string) {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		_, err := r.TLS.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: b.frontProxyCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if err == nil && r.Header.Get(remoteUser) != "" {
			return r.Header.Get(remoteUser), r.Header.Values(remoteGroup)
		}
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		if u, ok := b.tokens[tok]; ok {
			return u, nil
		}
	}
	return "system:anonymous", nil
}

// echo switches protocols and echoes one line, then closes.
func (b *backend) echo(w http.ResponseWriter) {
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test-echo\r\n\r\n")
	_ = rw.Flush()
	line, err := rw.ReadString('\n')
	if err != nil {
		return
	}
	fmt.Fprintf(rw, "%s echoes %s", b.name, line)
	_ = rw.Flush()
}

// testCluster is n backends, each with a Sidecar in front, sharing a fake clientset
// for their Leases.
type testCluster struct {
	clusterCA, clientCA, frontCA, otherCA *testCA
	// peerCA, if set, is a dedicated peer CA: sidecars present a certificate from it to
	// peers (who ask for DefaultPeerServerName) and verify peers with it alone.
	peerCA *testCA
	client *fake.Clientset
	nodes  []*testNode
}

type testNode struct {
	backend *backend
	sidecar *Sidecar
	srv     *httptest.Server
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    chan struct{}
}

// stop ends the sidecar's Run (which deletes its Lease) and closes its listener.
func (n *testNode) stop() {
	n.cancel()
	<-n.done
	n.srv.Close()
}

const (
	tokenBob     = "token-bob"
	tokenSidecar = "token-sidecar"
)

func newTestCluster(t testing.TB, docs ...*Document) *testCluster {
	t.Helper()
	c := newTestCAs(t)
	c.start(t, docs...)
	return c
}

// newTestCAs returns a cluster with its CAs and no node yet.
func newTestCAs(t testing.TB) *testCluster {
	return &testCluster{
		clusterCA: newTestCA(t, "cluster"), clientCA: newTestCA(t, "client"),
		frontCA: newTestCA(t, "front-proxy"), otherCA: newTestCA(t, "other"),
		client: fake.NewClientset(),
	}
}

// start starts a node for each document and waits until all know each other.
func (c *testCluster) start(t testing.TB, docs ...*Document) {
	t.Helper()
	for i, doc := range docs {
		c.nodes = append(c.nodes, c.startNode(t, fmt.Sprintf("server-%d", i), doc))
	}
	c.waitSynced(t)
}

func (c *testCluster) startNode(t testing.TB, name string, doc *Document) *testNode {
	t.Helper()
	b := &backend{
		name: name, doc: doc, frontProxyCAs: c.frontCA.pool(),
		tokens:    map[string]string{tokenBob: "bob", tokenSidecar: "sidecar"},
		watchStep: make(chan struct{}),
	}
	b.srv = httptest.NewUnstartedServer(b)
	b.srv.TLS = &tls.Config{Certificates: []tls.Certificate{c.clusterCA.serving(t)}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)

	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	localClient := &http.Client{Transport: bearerTransport{token: tokenSidecar, base: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: c.clusterCA.pool(), MinVersion: tls.VersionTLS12}}}}
	t.Cleanup(localClient.CloseIdleConnections)
	peerRoots, listenerTLS := c.clusterCA.pool(), ServerTLSConfig(c.clusterCA.serving(t))
	if c.peerCA != nil {
		serving, peer := c.clusterCA.serving(t), c.peerCA.serving(t)
		peerRoots = c.peerCA.pool()
		listenerTLS.Certificates = []tls.Certificate{serving} // for clients that send no server name
		listenerTLS.GetCertificate = PeerCertificate(DefaultPeerServerName,
			func() (*tls.Certificate, error) { return &peer, nil },
			func() (*tls.Certificate, error) { return &serving, nil })
	}
	s, err := NewSidecar(SidecarOptions{
		ID: "peerproxy-" + name, Address: ln.Addr().String(), LocalURL: b.srv.URL,
		LocalRootCAs: c.clusterCA.pool(), LocalClient: localClient, Client: c.client,
		ProxyClientCert: c.frontCA.client(t, "front-proxy-client"), PeerRootCAs: peerRoots,
		Identifier:   &CertIdentifier{ClientCAs: c.clientCA.pool(), RequestHeaderCAs: c.frontCA.pool(), AllowedNames: []string{"front-proxy-client"}},
		LocalRefresh: time.Hour, PeerRefresh: time.Hour, PeerTimeout: 2 * time.Second,
		Metrics: metrics, Logger: testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: NewServer(s, nil, nil), TLS: listenerTLS}
	srv.StartTLS()
	ctx, cancel := context.WithCancel(context.Background())
	n := &testNode{backend: b, sidecar: s, srv: srv, reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		s.Run(ctx)
	}()
	t.Cleanup(func() {
		select {
		case <-n.done:
		default:
			n.stop()
		}
	})
	return n
}

// waitSynced waits until every sidecar has synced and knows every other's discovery.
func (c *testCluster) waitSynced(t testing.TB) {
	t.Helper()
	waitFor(t, "sidecars synced with all peers", func() bool {
		for _, n := range c.nodes {
			d := n.sidecar.Directory()
			if !d.Synced() {
				return false
			}
			_, peers := d.peerGroups()
			if len(peers) != len(c.nodes)-1 {
				return false
			}
		}
		return true
	})
}

// httpClient returns a client of the sidecars: with cert as its client certificate and
// token as its bearer token, if set.
func (c *testCluster) httpClient(t testing.TB, cert *tls.Certificate, token string) *http.Client {
	t.Helper()
	tc := &tls.Config{RootCAs: c.clusterCA.pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: tc}
	t.Cleanup(tr.CloseIdleConnections)
	if token == "" {
		return &http.Client{Transport: tr}
	}
	return &http.Client{Transport: bearerTransport{token: token, base: tr}}
}

type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// waitFor polls cond; the bound only keeps a broken test from hanging.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("MVPROXY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// doc builds a server's discovery from "group/version/resource" names ("" group = core);
// "group/version/resource/subresource" adds a subresource to the resource listed before.
func doc(gvrs ...string) *Document {
	groups := &apidiscoveryv2.APIGroupDiscoveryList{}
	core := &apidiscoveryv2.APIGroupDiscoveryList{}
	for _, l := range []*apidiscoveryv2.APIGroupDiscoveryList{groups, core} {
		l.Kind, l.APIVersion = discoveryList, discoveryGroup+"/"+discoveryVersion
	}
	for _, s := range gvrs {
		parts := strings.Split(s, "/")
		g, v, r := parts[0], parts[1], parts[2]
		l := groups
		if len(parts) == 4 {
			if g == "" {
				l = core
			}
			last := &l.Items[len(l.Items)-1].Versions[len(l.Items[len(l.Items)-1].Versions)-1]
			res := &last.Resources[len(last.Resources)-1]
			res.Subresources = append(res.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: parts[3], Verbs: []string{"get"}})
			continue
		}
		if g == "" {
			l = core
		}
		gi := -1
		for i := range l.Items {
			if l.Items[i].Name == g {
				gi = i
			}
		}
		if gi < 0 {
			l.Items = append(l.Items, apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g}})
			gi = len(l.Items) - 1
		}
		grp := &l.Items[gi]
		vi := -1
		for i := range grp.Versions {
			if grp.Versions[i].Version == v {
				vi = i
			}
		}
		if vi < 0 {
			grp.Versions = append(grp.Versions, apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent})
			vi = len(grp.Versions) - 1
		}
		grp.Versions[vi].Resources = append(grp.Versions[vi].Resources, apidiscoveryv2.APIResourceDiscovery{
			Resource: r, Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list", "watch"},
		})
	}
	return NewDocument(groups, core)
}

// readLine reads one line of a streaming body.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	return strings.TrimSpace(line)
}

func httptestUnstarted(h http.Handler) *httptest.Server { return httptest.NewUnstartedServer(h) }
