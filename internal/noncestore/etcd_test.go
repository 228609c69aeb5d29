package noncestore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

// startEtcd runs the pinned etcd that make tools builds (_output/bin/etcd) on a free
// loopback port, or skips t without it (fails it under KPLUG_E2E_REQUIRED). It returns
// the client URL, and etcd's own client, which checks the records independently of the
// store. With a CA, etcd serves https with a certificate from it and asks clients for one
// (what --etcd-cafile, --etcd-certfile and --etcd-keyfile are for), and tlsConfig is a
// client's; usages are those of etcd's serving certificate.
func startEtcd(t *testing.T, ca *testpki.CA, usages ...x509.ExtKeyUsage) (endpoint string, client *clientv3.Client, tlsConfig *tls.Config, stop func()) {
	t.Helper()
	bin, _ := filepath.Abs(filepath.Join("..", "..", "_output", "bin", "etcd"))
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("KPLUG_E2E_REQUIRED") != "" {
			t.Fatalf("etcd is missing (%v): run make tools", err)
		}
		t.Skipf("etcd is missing (%v): run make tools", err)
	}
	ports := make([]int, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	scheme := "http"
	var tlsArgs []string
	if ca != nil {
		scheme = "https"
		serving, err := ca.Issue("etcd", &x509.Certificate{
			Subject:     pkix.Name{CommonName: "etcd"},
			ExtKeyUsage: usages,
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		})
		if err != nil {
			t.Fatal(err)
		}
		resolver, err := ca.IssueClient("resolver", "kplug-signature-resolver")
		if err != nil {
			t.Fatal(err)
		}
		tlsArgs = []string{"--cert-file", serving.CertFile, "--key-file", serving.KeyFile, "--client-cert-auth", "--trusted-ca-file", ca.File}
		tlsConfig = &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{resolver.MustTLS(t)}, MinVersion: tls.VersionTLS12}
	}
	client0 := fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	cmd := exec.Command(bin, append([]string{"--data-dir", t.TempDir(), "--listen-client-urls", client0, "--advertise-client-urls", client0,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "default=" + peer, "--log-level", "error"}, tlsArgs...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(stop)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client0}, DialTimeout: 5 * time.Second, TLS: tlsConfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := c.Get(ctx, "health")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not answer: %v", err)
		}
	}
	return client0, c, tlsConfig, stop
}

// TestEtcd: two stores sharing one etcd (two resolver replicas) accept a nonce once
// between them, even when many consume it at once; a record is forgotten after its
// expiry; with etcd gone, Consume fails rather than accepts.
func TestEtcd(t *testing.T) {
	endpoint, c, _, stop := startEtcd(t, nil)
	a, b := dialEtcd(t, endpoint, nil), dialEtcd(t, endpoint, nil)
	ctx := t.Context()
	exp := time.Now().Add(time.Minute)
	for i, tc := range []struct {
		s    *Etcd
		key  string
		want bool
	}{{a, "k1", true}, {b, "k1", false}, {a, "k1", false}, {b, "k2", true}} {
		ok, reason, err := tc.s.Consume(ctx, tc.key, "nonce-1", exp)
		if err != nil || ok != tc.want {
			t.Errorf("#%d Consume(%s) = %v %q %v, want %v", i, tc.key, ok, reason, err, tc.want)
		}
	}
	for i := range 5 {
		var accepted atomic.Int32
		var wg sync.WaitGroup
		for j := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := a
				if j%2 == 1 {
					s = b
				}
				if ok, _, err := s.Consume(ctx, "k", fmt.Sprint("race-", i), exp); err == nil && ok {
					accepted.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := accepted.Load(); n != 1 {
			t.Fatalf("nonce race-%d accepted %d times across two stores", i, n)
		}
	}
	// A short expiry: the record goes with its lease.
	if ok, _, err := a.Consume(ctx, "k3", "short", time.Now().Add(time.Second)); !ok || err != nil {
		t.Fatalf("short: %v %v", ok, err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		resp, err := c.Get(ctx, a.key("k3", "short"))
		if err == nil && resp.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the record outlived its lease by more than 15 s")
		}
	}
	stop()
	down, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if ok, _, err := b.Consume(down, "k4", "after", exp); ok || err == nil {
		t.Errorf("with etcd down: accepted %v, err %v; want an error", ok, err)
	}
}

// TestEtcdTLS: over https, the store verifies etcd's certificate against the given CA and
// presents its client certificate, which etcd requires; without the client certificate,
// etcd refuses it, and Consume fails. etcd's serving certificate is valid for clients
// too, as kubeadm issues it: etcd's JSON gateway connects to etcd itself with it.
func TestEtcdTLS(t *testing.T) {
	ca := testpki.NewTestCA(t, "etcd-ca")
	endpoint, c, tlsConfig, _ := startEtcd(t, ca, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	e := dialEtcd(t, endpoint, tlsConfig)
	ctx := t.Context()
	exp := time.Now().Add(time.Minute)
	for i, want := range []bool{true, false} {
		if ok, reason, err := e.Consume(ctx, "k1", "nonce-1", exp); err != nil || ok != want {
			t.Errorf("#%d Consume = %v %q %v, want %v", i, ok, reason, err, want)
		}
	}
	if resp, err := c.Get(ctx, e.key("k1", "nonce-1")); err != nil || resp.Count != 1 || resp.Kvs[0].Lease == 0 {
		t.Errorf("the record in etcd: %v %v; want one key with a lease", resp, err)
	}
	anonymous := dialEtcd(t, endpoint, &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12})
	if ok, _, err := anonymous.Consume(ctx, "k2", "nonce-1", exp); ok || err == nil {
		t.Errorf("without a client certificate: accepted %v, err %v; want an error", ok, err)
	}
}

// TestEtcdTLSServingOnly: an etcd whose serving certificate is for servers only cannot
// serve its JSON gateway to a client it asks for a certificate, since the gateway calls
// etcd with that certificate; Consume fails and says which certificate to fix.
func TestEtcdTLSServingOnly(t *testing.T) {
	ca := testpki.NewTestCA(t, "etcd-ca")
	endpoint, _, tlsConfig, _ := startEtcd(t, ca, x509.ExtKeyUsageServerAuth)
	e := dialEtcd(t, endpoint, tlsConfig)
	ok, _, err := e.Consume(t.Context(), "k1", "nonce-1", time.Now().Add(time.Minute))
	// etcd's own words depend on timing: "remote error: tls: bad certificate" while it
	// reads the gateway's handshake, "write: broken pipe" once it has closed.
	want := "; etcd's JSON gateway connects to etcd with etcd's serving certificate (or --client-cert-file): with --client-cert-auth, that certificate must also be valid for client authentication"
	if ok || err == nil || !strings.Contains(err.Error(), "answered 503 Service Unavailable: ") || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Consume = %v, %v; want a 503 ending %q", ok, err, want)
	}
}

func dialEtcd(t *testing.T, endpoint string, tlsConfig *tls.Config) *Etcd {
	t.Helper()
	e, err := DialEtcd(t.Context(), []string{endpoint}, "", 5*time.Second, tlsConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestDialEtcdRefusesPlainHTTPToAnotherHost: over a network, whoever can change the nonce
// records can replay what they saw.
func TestDialEtcdRefusesPlainHTTPToAnotherHost(t *testing.T) {
	for endpoint, want := range map[string]string{
		"http://etcd-0.example:2379": "plain http to another host: use https",
		"http://10.0.0.7:2379":       "plain http to another host",
		"etcd-0:2379":                "want http(s)://host:port",
	} {
		if _, err := DialEtcd(t.Context(), []string{endpoint}, "/n/", time.Second, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DialEtcd(%s) = %v, want %q", endpoint, err, want)
		}
	}
	for _, endpoint := range []string{"http://127.0.0.1:1", "http://localhost:1", "http://[::1]:1", "https://etcd-0.example:2379"} {
		e, err := DialEtcd(t.Context(), []string{endpoint}, "/n/", time.Second, nil)
		if err != nil {
			t.Errorf("DialEtcd(%s) = %v", endpoint, err)
			continue
		}
		_ = e.Close()
	}
}
