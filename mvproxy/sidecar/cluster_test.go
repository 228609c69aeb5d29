package sidecar

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/transport"

	"github.com/kplug/kplug/internal/reverseproxy"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// A test double of kube-apiserver for unit tests: it serves the discovery documents it
// is given, authenticates front-proxy headers (behind a front-proxy CA certificate) and
// bearer tokens, and answers each resource request with who it saw. Streaming and
// upgrades have endpoints of their own. The end-to-end tests use the real kube-apiserver.
type backend struct {
	name          string
	doc           *discovery.Document
	frontProxyCAs *x509.CertPool
	tokens        map[string]string
	srv           *httptest.Server
	watchStep     chan struct{} // a watch sends its second event after a receive from here
	received      atomic.Int32  // resource requests read whole
	// drop, when set, makes the backend read each resource request whole and then close
	// the connection without answering: a server that processed the request and
	// crashed, or a connection reset, before the answer.
	drop atomic.Bool
	// notReady, when set, makes /readyz fail, as while kube-apiserver starts.
	notReady atomic.Bool
	// header is the header of the last resource request answered with seen, as received.
	header atomic.Pointer[http.Header]
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
	Proto   string   `json:"proto"`
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, groups := b.authenticate(r)
	switch r.URL.Path {
	case "/readyz":
		if b.notReady.Load() {
			http.Error(w, "[-]informer-sync failed: reason withheld\nreadyz check failed", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "ok")
		return
	case "/apis", "/api":
		l := b.doc.Groups
		if r.URL.Path == "/api" {
			l = b.doc.Core
		}
		body, etag, _ := discovery.Encode(l)
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", discovery.AcceptAggregated)
		_, _ = w.Write(body)
		return
	}
	gvr, ok := mvproxy.ResourceOf(r.URL.Path)
	if !ok || !b.doc.Serves(gvr) {
		reverseproxy.WriteStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", 0)
		return
	}
	if b.drop.Load() {
		_, _ = io.ReadAll(r.Body)
		b.received.Add(1)
		// The connection closed over HTTP/1.1, the stream reset over HTTP/2.
		panic(http.ErrAbortHandler)
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
		b.received.Add(1)
		h := r.Header.Clone()
		b.header.Store(&h)
		_ = json.NewEncoder(w).Encode(seen{
			Server: b.name, User: user, Groups: groups, Proxied: r.Header.Get(mvproxy.ProxiedHeader),
			Token: r.Header.Get("Authorization") != "", Remote: r.Header.Get("X-Remote-User") != "", Body: string(body),
			Proto: r.Proto,
		})
	}
}

func (b *backend) authenticate(r *http.Request) (string, []string) {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		_, err := r.TLS.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: b.frontProxyCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if err == nil && r.Header.Get("X-Remote-User") != "" {
			return r.Header.Get("X-Remote-User"), r.Header.Values("X-Remote-Group")
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
	clusterCA, clientCA, frontCA, otherCA *testpki.CA
	// peerCA, if set, is a dedicated peer CA: sidecars present a certificate from it to
	// peers (who ask for DefaultPeerServerName) and verify peers with it alone.
	peerCA *testpki.CA
	client *fake.Clientset
	nodes  []*testNode
}

// testNode is a backend and its sidecar: the sidecar's handler behind a real httptest
// frontend, with the sidecar's background work (Leases, peers, local discovery) running.
// Serve, which does both, is tested on its own (TestServe): here the test must be able
// to kill the frontend alone, as a crash that leaves the Lease behind.
type testNode struct {
	backend *backend
	sidecar *Sidecar
	srv     *httptest.Server
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    chan struct{}
	// peerProto is the protocol of the last request a peer sent (r.Proto).
	peerProto atomic.Value
}

// recordPeerProto records in peerProto the protocol of requests that come with a
// client certificate from the front-proxy CA, which only peers present here.
func (n *testNode) recordPeerProto(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && r.TLS.PeerCertificates[0].Subject.CommonName == "front-proxy-client" {
			n.peerProto.Store(r.Proto)
		}
		h.ServeHTTP(w, r)
	})
}

// stop ends the sidecar's background work (which deletes its Lease) and closes its
// listener.
func (n *testNode) stop() {
	n.cancel()
	<-n.done
	n.srv.Close()
}

const (
	tokenBob     = "token-bob"
	tokenSidecar = "token-sidecar"
)

func newTestCluster(t testing.TB, docs ...*discovery.Document) *testCluster {
	t.Helper()
	c := newTestCAs(t)
	c.start(t, docs...)
	return c
}

// closed is a closed channel: run keeps the Lease at once.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// requestHeaderConfigMap is kube-system/extension-apiserver-authentication as
// kube-apiserver publishes it with kubeadm's request-header flags, then kv's keys set to
// kv's values.
func requestHeaderConfigMap(kv ...string) *corev1.ConfigMap {
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

// newTestCAs returns a cluster with its CAs and no node yet; kube-apiserver publishes
// kubeadm's request-header names.
func newTestCAs(t testing.TB) *testCluster {
	return &testCluster{
		clusterCA: testpki.NewTestCA(t, "cluster"), clientCA: testpki.NewTestCA(t, "client"),
		frontCA: testpki.NewTestCA(t, "front-proxy"), otherCA: testpki.NewTestCA(t, "other"),
		client: fake.NewClientset(requestHeaderConfigMap()),
	}
}

// start starts a node for each document and waits until all know each other.
func (c *testCluster) start(t testing.TB, docs ...*discovery.Document) {
	t.Helper()
	for i, doc := range docs {
		c.nodes = append(c.nodes, c.startNode(t, fmt.Sprintf("server-%d", i), doc))
	}
	c.waitSynced(t)
}

func (c *testCluster) startNode(t testing.TB, name string, doc *discovery.Document) *testNode {
	t.Helper()
	b := c.startBackend(t, name, doc)
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o, reg := c.options(t, name, b, ln)
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	listenerTLS := serverTLSConfig(selectCertificate(s.o.PeerServerName, o.GetPeerCertificate, o.GetServingCertificate))
	serving, _ := o.GetServingCertificate()
	listenerTLS.Certificates = []tls.Certificate{*serving} // for clients that send no server name
	n := &testNode{backend: b, sidecar: s, reg: reg, done: make(chan struct{})}
	n.peerProto.Store("")
	srv := &httptest.Server{Listener: ln, Config: reverseproxy.NewServer(n.recordPeerProto(s.handler), nil, nil), TLS: listenerTLS}
	srv.StartTLS()
	// The node runs until the test stops it or the Cleanup below does, which closes its
	// server too: not when the test's context ends.
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	n.srv, n.cancel = srv, cancel
	go func() {
		defer close(n.done)
		s.run(ctx, ln.Addr().String(), closed)
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

// startBackend starts an apiserver double serving doc, with a serving certificate from
// the cluster CA.
func (c *testCluster) startBackend(t testing.TB, name string, doc *discovery.Document) *backend {
	t.Helper()
	return c.startBackendOn(t, name, doc, "127.0.0.1:0")
}

// startBackendOn is startBackend listening on addr.
func (c *testCluster) startBackendOn(t testing.TB, name string, doc *discovery.Document, addr string) *backend {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{
		name: name, doc: doc, frontProxyCAs: c.frontCA.Pool(),
		tokens:    map[string]string{tokenBob: "bob", tokenSidecar: "sidecar"},
		watchStep: make(chan struct{}),
	}
	b.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}}
	reverseproxy.LimitHeaders(b.srv.Config, reverseproxy.MaxHeaderBytes) // kube-apiserver's, not Go's
	// kube-apiserver offers both: HTTP/2 for requests, HTTP/1.1 for upgrades.
	b.srv.TLS = &tls.Config{Certificates: []tls.Certificate{servingCert(t, c.clusterCA)}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"}}
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)
	return b
}

// options are the Options of the sidecar named name in front of b, listening on ln, with
// the registry of its metrics.
func (c *testCluster) options(t testing.TB, name string, b *backend, ln net.Listener) (Options, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	metrics, err := mvproxy.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	localClient := &http.Client{Transport: transport.NewBearerAuthRoundTripper(tokenSidecar, &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: c.clusterCA.Pool(), MinVersion: tls.VersionTLS12}})}
	t.Cleanup(localClient.CloseIdleConnections)
	peerRoots, getPeer := c.clusterCA.Pool(), (func() (*tls.Certificate, error))(nil)
	if c.peerCA != nil {
		peerRoots, getPeer = c.peerCA.Pool(), static(servingCert(t, c.peerCA))
	}
	return Options{
		ID: "peerproxy-" + name, Listener: ln, LocalURL: b.srv.URL,
		GetServingCertificate: static(servingCert(t, c.clusterCA)), GetPeerCertificate: getPeer,
		LocalRootCAs: c.clusterCA.Pool(), LocalClient: localClient, Client: c.client,
		GetProxyClientCertificate: static(clientCert(t, c.frontCA, "front-proxy-client")), PeerRootCAs: peerRoots,
		Identifier:   &mvproxy.CertIdentifier{ClientCAs: c.clientCA.Pool(), RequestHeaderCAs: c.frontCA.Pool(), AllowedNames: []string{"front-proxy-client"}},
		LocalRefresh: time.Hour, PeerRefresh: time.Hour, PeerTimeout: 2 * time.Second,
		Metrics: metrics, Logger: testLogger(),
	}, reg
}

// waitSynced waits until every sidecar has synced and knows every other's discovery.
func (c *testCluster) waitSynced(t testing.TB) {
	t.Helper()
	poll.Until(t, "sidecars synced with all peers", func() bool {
		for _, n := range c.nodes {
			d := n.sidecar.dir
			if !d.Synced() {
				return false
			}
			_, peers := d.PeerGroups()
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
	tc := &tls.Config{RootCAs: c.clusterCA.Pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: tc}
	t.Cleanup(tr.CloseIdleConnections)
	if token == "" {
		return &http.Client{Transport: tr}
	}
	return &http.Client{Transport: transport.NewBearerAuthRoundTripper(token, tr)}
}

func testLogger() *slog.Logger {
	if os.Getenv("MVPROXY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
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

// static returns cert, as the certificate getters of Options.
func static(cert tls.Certificate) func() (*tls.Certificate, error) {
	return func() (*tls.Certificate, error) { return &cert, nil }
}

var issued atomic.Int64 // names the files of the test certificates

func issue(t testing.TB, ca *testpki.CA, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	kp, err := ca.Issue(fmt.Sprintf("cert-%d", issued.Add(1)), tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return kp.MustTLS(t)
}

// servingCert issues an apiserver's serving certificate: for 127.0.0.1 and for the name
// peers verify, DefaultPeerServerName.
func servingCert(t testing.TB, ca *testpki.CA) tls.Certificate {
	return issue(t, ca, &x509.Certificate{
		Subject: pkix.Name{CommonName: "server"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost", mvproxy.DefaultPeerServerName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// nodeServingCert issues what a kubelet's serving certificate from the cluster CA looks
// like: the node's name and address, not the apiserver's name.
func nodeServingCert(t testing.TB, ca *testpki.CA) tls.Certificate {
	return issue(t, ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:node:node-1", Organization: []string{"system:nodes"}},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"node-1"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// clientCert issues a client certificate for user in groups.
func clientCert(t testing.TB, ca *testpki.CA, user string, groups ...string) tls.Certificate {
	return issue(t, ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// counter is the value of the counter name whose labels have the values given as name,
// value pairs (a label not given may have any value; a label absent has the value ""),
// summed over the matching series.
func counter(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				value := ""
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] {
						value = l.GetValue()
					}
				}
				if value != labels[i+1] {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// peerProxyErrors counts node's errors of type typ about no resource (peers, Leases).
func peerProxyErrors(t testing.TB, n *testNode, typ string) float64 {
	return counter(t, n.reg, "apiserver_peer_proxy_errors_total", "type", typ, "group", "", "version", "", "resource", "")
}

func discoverySyncErrors(t testing.TB, n *testNode, typ string) float64 {
	return counter(t, n.reg, "apiserver_peer_discovery_sync_errors_total", "type", typ)
}
