//go:build unix

package proxyplugin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/execcache"
	"github.com/kplug/kplug/internal/testkit/sigverify"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// received is what the stand-in API server of the forwarding tests got: the headers as
// they arrived, and whether the signature verified over them.
type received struct {
	seq    int    // how many requests the server has received
	target string // the request target as it arrived (RequestURI)
	header http.Header
	err    error
}

// recordingAPI is an API server that verifies each request with verify, records what it
// received, and answers 200 or 401.
func recordingAPI(t *testing.T, verify func(r *http.Request, body []byte) error) (*httptest.Server, func() received) {
	t.Helper()
	var (
		mu   sync.Mutex
		last received
	)
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
			err = verify(r, body)
		}
		mu.Lock()
		last = received{seq: last.seq + 1, target: r.RequestURI, header: r.Header.Clone(), err: err}
		mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(api.Close)
	return api, func() received {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// serveProxyPlugin runs proxy-plugin's proxy with o in this process, for a client that
// holds a lock and whose cluster's server is api's URL followed by path, and returns a function that sends one raw HTTP/1.1 request through it
// (over the hop's mutual TLS, on the socket or through kplug run's bridge) and returns the
// status line.
func serveProxyPlugin(t *testing.T, api *httptest.Server, path string, o *Options) func(raw string, viaBridge bool) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kp") // short: a socket path is limited to about 100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	t.Setenv("XDG_RUNTIME_DIR", dir)
	lock, err := execproxy.NewLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})
	info := fmt.Sprintf(`{"kind":"ExecCredential","apiVersion":%q,"spec":{"cluster":{"server":%q,"certificate-authority-data":%q},"interactive":false,"lockFilePath":%q}}`,
		execcred.V1, api.URL+path, base64.StdEncoding.EncodeToString(ca), lock.Path)
	answer, stdout := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- server.Run(t.Context(), func(ctx context.Context, req *server.Request) (*server.Options, func(), error) {
			return o.ServerOptions(ctx, slog.New(slog.DiscardHandler), noGuard, req)
		}, server.Process{ExecInfo: info, Stdout: stdout})
		_ = stdout.Close()
	}()
	t.Cleanup(func() {
		_ = lock.Close() // the client exits, and so does its proxy
		if err := <-done; err != nil {
			t.Errorf("proxy: %v", err)
		}
	})
	var cred execcred.ExecCredential
	if err := json.NewDecoder(answer).Decode(&cred); err != nil || cred.Status == nil || cred.Status.ProxyConfig == nil {
		t.Fatalf("the proxy's answer: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, answer) }()
	cert, err := tls.X509KeyPair([]byte(cred.Status.ClientCertificateData), []byte(cred.Status.ClientKeyData))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cred.Status.ProxyConfig.CertificateAuthorityData)
	hop := &tls.Config{RootCAs: roots, ServerName: wire.ProxyServerName, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	socket := strings.TrimPrefix(cred.Status.ProxyConfig.URL, "unix://")
	// Clients that take a proxy-url (kubectl through kplug run) reach the same socket
	// through the bridge: a CONNECT, then the same TLS session end to end.
	bridge, err := execproxy.NewBridge(socket, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bridge.Close() })
	password, _ := bridge.ProxyURL().User.Password()
	connect := "CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\nProxy-Authorization: Basic " +
		base64.StdEncoding.EncodeToString([]byte(bridge.ProxyURL().User.Username()+":"+password)) + "\r\n\r\n"
	return func(raw string, viaBridge bool) string {
		t.Helper()
		network, addr := "unix", socket
		if viaBridge {
			network, addr = "tcp", bridge.Addr
		}
		conn, err := (&net.Dialer{}).DialContext(t.Context(), network, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if viaBridge {
			// The bridge answers the CONNECT before it reads anything more: read exactly
			// its answer, so that no byte of the TLS session is taken with it.
			if _, err := io.WriteString(conn, connect); err != nil {
				t.Fatal(err)
			}
			want := "HTTP/1.1 200 Connection established\r\n\r\n"
			got := make([]byte, len(want))
			if _, err := io.ReadFull(conn, got); err != nil || string(got) != want {
				t.Fatalf("CONNECT to the bridge: %q, %v", got, err)
			}
		}
		tc := tls.Client(conn, hop)
		if _, err := io.WriteString(tc, raw); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.Status
	}
}

// hostile are requests a client could send to make the proxy forward something other than
// what it signed or added, or than the client sent: a Connection header naming the added
// and covered headers (which ReverseProxy removes as hop-by-hop, after the client chose
// them and before the proxy signs), and duplicate lines of covered headers.
var hostile = []struct {
	name, raw string
	refused   bool // answered 400, and nothing reaches the API server
}{
	{"Connection names the added and covered headers", "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: h\r\n" +
		"Connection: keep-alive, X-Added, X-K8s-Audience, Impersonate-User, Impersonate-Group, Signature, Signature-Input, Content-Digest, Signature-Certificate, Authorization, X-Amz-Date, X-Amz-Content-Sha256, Content-Type, Audit-Id\r\n" +
		"Impersonate-User: bob\r\nImpersonate-Group: g1\r\nImpersonate-Group: g2\r\nAudit-Id: 1\r\nContent-Type: application/json\r\n" +
		"X-Added: forged\r\nX-K8s-Audience: other\r\nSignature: a=:AA==:\r\nSignature-Input: a=()\r\nX-Amz-Date: 20200101T000000Z\r\n" +
		"Content-Length: 2\r\n\r\n{}", true},
	{"Connection names the client's impersonation", "GET /api/v1/pods HTTP/1.1\r\nHost: h\r\n" +
		"Connection: Impersonate-User\r\nImpersonate-User: bob\r\n\r\n", true},
	{"upgrade naming covered headers", "GET /api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1\r\nHost: h\r\n" +
		"Connection: Upgrade, Impersonate-User, X-Added\r\nUpgrade: websocket\r\nSec-Websocket-Version: 13\r\nSec-Websocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		"Sec-Websocket-Protocol: v5.channel.k8s.io\r\nImpersonate-User: bob\r\n\r\n", true},
	{"forged signature fields and added header", "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n" +
		"Impersonate-User: bob\r\nImpersonate-Group: g1\r\nImpersonate-Group: g2\r\nAudit-Id: 1\r\nContent-Type: application/json\r\n" +
		"X-Added: forged\r\nX-K8s-Audience: other\r\nSignature: a=:AA==:\r\nSignature-Input: a=()\r\nX-Amz-Date: 20200101T000000Z\r\n" +
		"Content-Length: 2\r\n\r\n{}", false},
	{"duplicate and hop-by-hop lines", "GET /api/v1/pods?limit=1 HTTP/1.1\r\nHost: h\r\n" +
		"User-Agent: first\r\nUser-Agent: second\r\nAccept: application/json\r\nAccept: */*\r\n" +
		"Te: trailers, gzip\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTrailer: X-T\r\nX-Added: forged\r\nX-Added: twice\r\n\r\n", false},
	{"upgrade", "GET /api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1\r\nHost: h\r\n" +
		"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-Websocket-Version: 13\r\nSec-Websocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		"Sec-Websocket-Protocol: v5.channel.k8s.io\r\nImpersonate-User: bob\r\n\r\n", false},
}

// checkForwarded sends each hostile request through send, on the socket and through the
// bridge, and checks what the API server
// received: nothing for a refused one; for the others a request whose signature verified
// (so every covered field arrived as it was signed), with the added header's configured
// value only, and with the impersonation the client asked for.
func checkForwarded(t *testing.T, send func(string, bool) string, last func() received, more func(*testing.T, http.Header)) {
	t.Helper()
	for _, tt := range hostile {
		for _, viaBridge := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, through the bridge %v", tt.name, viaBridge), func(t *testing.T) {
				before := last()
				status := send(tt.raw, viaBridge)
				got := last()
				if tt.refused {
					if !strings.HasPrefix(status, "400 ") || got.seq != before.seq {
						t.Errorf("answered %q, API server reached: %v; want 400 and nothing forwarded", status, got.seq != before.seq)
					}
					return
				}
				if got.seq == before.seq {
					t.Fatalf("answered %q, and the API server got nothing", status)
				}
				if got.err != nil {
					t.Errorf("the signature does not verify over what the API server received: %v\nreceived %v", got.err, got.header)
				}
				if v := got.header.Values("X-Added"); len(v) != 1 || v[0] != "configured" {
					t.Errorf("X-Added arrived as %q, want only the configured value", v)
				}
				if strings.Contains(tt.raw, "Impersonate-User: bob") && got.header.Get("Impersonate-User") != "bob" {
					t.Errorf("Impersonate-User arrived as %q, want bob", got.header.Values("Impersonate-User"))
				}
				if more != nil {
					more(t, got.header)
				}
			})
		}
	}
}

// rfc9421API is an API server that verifies requests signed by proxy-plugin with the
// signOptions it returns (KEP-6308, audience cluster-1).
func rfc9421API(t *testing.T) (*httptest.Server, func() received, signOptions) {
	t.Helper()
	ca := testpki.NewTestCA(t, "signing CA")
	signer, err := ca.IssueClient("signer", "signer")
	if err != nil {
		t.Fatal(err)
	}
	policy := httpsig.Policy{RequiredHeaders: map[string][]string{httpsig.AudienceHeader: {"cluster-1"}}}
	api, last := recordingAPI(t, func(r *http.Request, _ []byte) error {
		_, err := httpsig.Verify(r, policy, func(s *httpsig.Signature) (any, error) {
			if s.Certificate == nil || s.Certificate.Subject.CommonName != "signer" {
				return nil, errors.New("not the signer's certificate")
			}
			return s.Certificate.PublicKey, nil
		})
		return err
	})
	return api, last, signOptions{scheme: "rfc9421", signKey: signer.KeyFile, signCert: signer.CertFile, signAudience: "cluster-1"}
}

// sigv4API is an API server that verifies requests signed by proxy-plugin with the
// signOptions it returns, with aws-sdk-go-v2's signer (internal/sigverify).
func sigv4API(t *testing.T) (*httptest.Server, func() received, signOptions) {
	t.Helper()
	creds := aws.Credentials{AccessKeyID: "AKIDFORWARD", SecretAccessKey: "forward-secret"}
	t.Setenv("AWS_ACCESS_KEY_ID", creds.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", creds.SecretAccessKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	api, last := recordingAPI(t, func(r *http.Request, body []byte) error {
		_, err := sigverify.SigV4(r, body, "eks", "eu-west-1", func(id string) (aws.Credentials, bool) {
			return creds, id == creds.AccessKeyID
		}, time.Now())
		return err
	})
	return api, last, signOptions{scheme: "sigv4", service: "eks", region: "eu-west-1", awsTimeout: 10 * time.Second}
}

// TestSecurityProxyPluginSignsWhatItForwards sends each hostile request through
// proxy-plugin --header --sign rfc9421 to an API server that verifies the KEP-6308
// signature over the request it received (checkForwarded).
// Issue 27 N2 review: ReverseProxy removes the headers Connection names; the exec proxy
// signed after that removal, but a client's duplicate User-Agent lines were signed joined
// and sent as the first line only, and a Connection header silently dropped the client's
// own Impersonate-User, turning a request as bob into one as the signer.
func TestSecurityProxyPluginSignsWhatItForwards(t *testing.T) {
	api, last, sign := rfc9421API(t)
	send := serveProxyPlugin(t, api, "", &Options{headers: []string{"X-Added=configured"}, sign: sign})
	checkForwarded(t, send, last, func(t *testing.T, h http.Header) {
		if v := h.Values(httpsig.AudienceHeader); len(v) != 1 || v[0] != "cluster-1" {
			t.Errorf("%s arrived as %q, want cluster-1", httpsig.AudienceHeader, v)
		}
	})
}

// TestSecurityProxyPluginSigV4SignsWhatItForwards is the same for --sign sigv4, verified
// by aws-sdk-go-v2's signer (internal/sigverify), which also refuses a request carrying
// an Impersonate-*, X-Amz-* or Content-Type header the signature does not cover.
// Issue 27 N2 review.
func TestSecurityProxyPluginSigV4SignsWhatItForwards(t *testing.T) {
	api, last, sign := sigv4API(t)
	send := serveProxyPlugin(t, api, "", &Options{headers: []string{"X-Added=configured"}, sign: sign})
	checkForwarded(t, send, last, nil)
}

// TestSecurityProxyPluginSignsTheTargetItSends: proxy-plugin signs the request target it
// sends, which is not the one its client sent when the cluster's server URL has a path
// (https://host/prefix) or when the query has parts ReverseProxy drops (a ';', a bad '%'
// escape). The API server verifies each signature over the target it received.
// Issue 27 review of N2 (F3): the outgoing request kept the client's RequestURI, which
// the RFC 9421 signer prefers to the URL, so it signed the incoming target: with a path
// in the server URL every signed request failed 401, and a dropped query part was signed
// all the same.
func TestSecurityProxyPluginSignsTheTargetItSends(t *testing.T) {
	requests := []struct{ raw, target string }{
		{"GET /api/v1/pods?limit=1 HTTP/1.1\r\nHost: h\r\n\r\n", "/api/v1/pods?limit=1"},
		{"GET /api/v1/pods?limit=1;x=2&watch=false HTTP/1.1\r\nHost: h\r\n\r\n", "/api/v1/pods?watch=false"},
		{"GET /api/v1/pods?a=%zz&limit=1 HTTP/1.1\r\nHost: h\r\n\r\n", "/api/v1/pods?limit=1"},
		{"GET /api/v1/namespaces/x%2Fy/pods HTTP/1.1\r\nHost: h\r\n\r\n", "/api/v1/namespaces/x%2Fy/pods"},
		{"GET /version? HTTP/1.1\r\nHost: h\r\n\r\n", "/version?"},
	}
	for _, scheme := range []struct {
		name string
		api  func(*testing.T) (*httptest.Server, func() received, signOptions)
	}{{"rfc9421", rfc9421API}, {"sigv4", sigv4API}} {
		for _, path := range []string{"", "/prefix"} {
			t.Run(fmt.Sprintf("%s, server path %q", scheme.name, path), func(t *testing.T) {
				api, last, sign := scheme.api(t)
				send := serveProxyPlugin(t, api, path, &Options{sign: sign})
				for _, tt := range requests {
					before := last()
					status := send(tt.raw, false)
					got := last()
					line, _, _ := strings.Cut(tt.raw, " HTTP/1.1")
					if got.seq == before.seq {
						t.Errorf("%s: answered %q, and the API server got nothing", line, status)
						continue
					}
					if want := path + tt.target; got.target != want {
						t.Errorf("%s: the API server got %q, want %q", line, got.target, want)
					}
					if got.err != nil || !strings.HasPrefix(status, "200 ") {
						t.Errorf("%s: answered %q; the signature does not verify over %q: %v", line, status, got.target, got.err)
					}
				}
			})
		}
	}
}

// noGuard is a client without a credential plugin policy.
func noGuard() (*execcache.Guard, error) { return nil, nil }
