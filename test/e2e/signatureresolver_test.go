package e2e

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/test/e2e/framework"
)

// AWS's documented example credentials, which docs/http-signatures.md's how-to uses.
const (
	awsExampleKeyID  = "AKIAIOSFODNN7EXAMPLE"
	awsExampleSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

// Key IDs of the resolver's key file beside the example key: AWS's other example key ID,
// listed in keyIDPrefixes but in no key file, and two keys the resolver holds staged
// after the ladder's date step, for the day of the test and for the day before.
const (
	awsUnservedKeyID = "AKIAI44QH8DHBEXAMPLE"
	stagedKeyID      = "AKIASTAGEDTODAYEXAMPLE"
	staleStageKeyID  = "AKIASTAGEDYESTERDAYEXAMPLE"
)

// resolverKeyFile is a key file with SigV4's ladder and AWS's example key, mapped to alice
// in developers, scoped to us-east-1 and the service kubernetes; then the example secret
// staged after the date step for day (stagedKeyID) and the day before (staleStageKeyID),
// mapped to bob.
func resolverKeyFile(day time.Time) string {
	staged := func(keyID string, day time.Time) string {
		mac := hmac.New(sha256.New, []byte("AWS4"+awsExampleSecret))
		mac.Write([]byte(day.UTC().Format("20060102")))
		return `- keyID: ` + keyID + `
  algorithm: hmac-sha256
  secretBase64: ` + base64.StdEncoding.EncodeToString(mac.Sum(nil)) + `
  derived: true
  stage:
    from: date
    scope: {date: "` + day.UTC().Format("20060102") + `", region: us-east-1, service: kubernetes}
  user: {username: bob}
`
	}
	return resolverExampleKey + staged(stagedKeyID, day) + staged(staleStageKeyID, day.Add(-24*time.Hour))
}

const resolverExampleKey = `kind: SignatureResolverKeys
keyDerivation:
  kind: hmac-ladder
  hash: sha-256
  secretPrefix: AWS4
  steps:
  - {name: date, date: YYYYMMDD}
  - {name: region, scope: true}
  - {name: service, scope: true}
  - {name: terminator, literal: aws4_request}
keys:
- keyID: ` + awsExampleKeyID + `
  algorithm: hmac-sha256
  secretBase64: d0phbHJYVXRuRkVNSS9LN01ERU5HL2JQeFJmaUNZRVhBTVBMRUtFWQ==
  derived: true
  stage:
    scope: {region: us-east-1, service: kubernetes}
  user: {username: alice, groups: [developers]}
`

// resolverProxyConfig sends the example key IDs to the resolver on socket, which consumes
// nonces; signatures are good for 2m plus 5s of skew.
func resolverProxyConfig(socket string) string {
	return `apiVersion: apiserver.config.k8s.io/v1alpha1
kind: AuthenticationConfiguration
httpSignature:
  requiredSignedHeaders:
    X-K8s-Audience: [` + signatureAudience + `]
  maxClockSkew: 5s
  authenticators:
  - name: aws-access-keys
    maxAge: 2m
    resolver:
      endpoint: unix://` + socket + `
      keyIDPrefixes: [` + strings.Join([]string{awsExampleKeyID, awsUnservedKeyID, stagedKeyID, staleStageKeyID}, ", ") + `]
      nonceHandling: Consume
`
}

// startResolver runs the built kplug signature-resolver as a process of its own on a
// socket in a new private directory, with keys and flags, and returns once it listens.
func startResolver(t *testing.T, cp *framework.ControlPlane, bin, name, keys string, flags ...string) (socket string, proc *framework.Process) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), name, "resolver.sock")
	return socket, startResolverAt(t, cp, bin, name, socket, keys, flags...)
}

// startResolverAt is startResolver on socket.
func startResolverAt(t *testing.T, cp *framework.ControlPlane, bin, name, socket, keys string, flags ...string) *framework.Process {
	t.Helper()
	proc, err := cp.StartProcess(name, append([]string{filepath.Join(bin, "kplug"), "signature-resolver", "-v=4", "--keys=" + keys, "--socket=" + socket}, flags...), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proc.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("===== %s =====\n%s", name, proc.Tail(50))
		}
	})
	poll.Until(t, name+" to listen", func() bool {
		if !proc.Running() {
			t.Fatalf("%s exited: %v\n%s", name, proc.Err(), proc.Tail(20))
		}
		fi, err := os.Stat(socket)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	})
	return proc
}

// startResolverProxy runs kplug signature-proxy with resolverProxyConfig(socket), and
// returns once it forwards.
func startResolverProxy(t *testing.T, cp *framework.ControlPlane, socket string) *sidecar {
	t.Helper()
	s := startSignatureProxyConfig(t, cp, resolverProxyConfig(socket))
	poll.Until(t, "signature-proxy to check the request-header names", func() bool { return strings.Contains(s.log.String(), signatureProxyForwarding) })
	return s
}

// awsSigner signs as kplug proxy-plugin --sign-key-derivation aws does: with the key
// derived from secret for the signature's date and region/kubernetes, under keyID and
// that scope; now, if set, is its clock.
func awsSigner(t *testing.T, keyID, secret, region string, now func() time.Time) *httpsig.Signer {
	t.Helper()
	s, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key: httpsig.Key{Secret: []byte(secret), Derivation: &httpsig.Derivation{
			Ladder: httpsig.SigV4Ladder(), Name: keyID, Scope: map[string]string{"region": region, "service": "kubernetes"},
		}},
		Headers: map[string]string{httpsig.AudienceHeader: signatureAudience},
		Now:     now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signedReview is a SelfSubjectReview request for authority (host:port), signed by
// signer, as the bytes it sends: one request on a connection of its own, its Audit-Id
// (covered) auditID.
func signedReview(t *testing.T, signer *httpsig.Signer, authority, auditID string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "https://"+authority+selfSubjectReviewPath, strings.NewReader(selfSubjectReview))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "kplug-e2e")
	req.Header.Set("Audit-Id", auditID)
	req.Close = true
	if err := signer.Sign(req); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := req.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// answer is what a verifier said to a request.
type answer struct {
	code       int
	retryAfter string
	message    string // the Status message, or the user a SelfSubjectReview names
}

// sendRaw sends raw, byte for byte, over a TLS connection of its own to the proxy at
// base, and reads the answer.
func sendRaw(t *testing.T, cp *framework.ControlPlane, base string, raw []byte) answer {
	t.Helper()
	d := tls.Dialer{Config: &tls.Config{RootCAs: cp.PKI.ClusterCA.Pool(), MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(t.Context(), "tcp", strings.TrimPrefix(base, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	if _, err := conn.Write(raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if resp.StatusCode == http.StatusCreated {
		var review struct {
			Status struct {
				UserInfo struct {
					Username string   `json:"username"`
					Groups   []string `json:"groups"`
				} `json:"userInfo"`
			} `json:"status"`
		}
		if err := json.Unmarshal(body, &review); err != nil {
			t.Fatalf("201 with %s: %v", body, err)
		}
		a.message = fmt.Sprintf("%s %v", review.Status.UserInfo.Username, review.Status.UserInfo.Groups)
		return a
	}
	var s metav1.Status
	if err := json.Unmarshal(body, &s); err != nil || s.Kind != "Status" {
		t.Errorf("%d answer is not a Status: %s", resp.StatusCode, body)
	}
	a.message = s.Message
	return a
}

// auditCounts counts, once the event of the request with sentinel's audit ID is in
// auditLog, the ResponseComplete events of each audit ID in ids. kube-apiserver writes a
// request's events before it answers (the log backend blocks), so a request answered
// before the sentinel was sent is in the log by then if it ever reached kube-apiserver.
func auditCounts(t *testing.T, auditLog, sentinel string, ids []string) map[string]int {
	t.Helper()
	var counts map[string]int
	poll.Until(t, "the sentinel request's audit event", func() bool {
		data, err := os.ReadFile(auditLog)
		if err != nil {
			return false
		}
		counts = map[string]int{}
		for line := range strings.SplitSeq(string(data), "\n") {
			var event struct {
				AuditID string `json:"auditID"`
				Stage   string `json:"stage"`
			}
			if json.Unmarshal([]byte(line), &event) == nil && event.Stage == "ResponseComplete" {
				counts[event.AuditID]++
			}
		}
		return counts[sentinel] == 1
	})
	out := map[string]int{}
	for _, id := range ids {
		out[id] = counts[id]
	}
	return out
}

// TestSignatureResolverReplicas: two kplug signature-proxy replicas in front of one
// kube-apiserver, each asking its own kplug signature-resolver process, the two resolvers
// recording nonces in one etcd (the control plane's, under a prefix of their own), as on
// two machines. A request signed once with the AWS-derived key and accepted by replica A
// is refused as replayed when the same bytes reach replica B (and A again). Then the
// refusals of KEP-6308's resolver backend, each a 401 or a 503 with Retry-After: a key
// scoped to another region, a key ID whose date is not the signature's, an expired
// created, a key ID no resolver is configured for, one the resolver does not serve, a
// wrong secret; the resolver stopped (its socket gone); the etcd of a third resolver
// stopped. kube-apiserver's audit log shows that none of the refused requests reached it.
func TestSignatureResolverReplicas(t *testing.T) {
	dir := t.TempDir()
	policy, auditLog := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	writeBytes(t, policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"))
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{
		Flags: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog},
	}}})
	bin := kplugBin(t, cp)
	grantSignatureProxy(t, cp)
	keys := filepath.Join(dir, "resolver-keys.yaml")
	// Requests to the staged keys are all created at now, whatever the time when they are
	// sent: the keys' day is now's.
	now := time.Now()
	at := func() time.Time { return now }
	writeBytes(t, keys, []byte(resolverKeyFile(now)))
	etcdFlags := []string{"--nonce-store=etcd", "--etcd-endpoints=" + cp.EtcdURL, "--etcd-prefix=/kplug-e2e/nonces/"}
	socketA, _ := startResolver(t, cp, bin, "resolver-a", keys, etcdFlags...)
	socketB, resolverB := startResolver(t, cp, bin, "resolver-b", keys, etcdFlags...)
	proxyA, proxyB := startResolverProxy(t, cp, socketA), startResolverProxy(t, cp, socketB)
	// Both replicas are one service to clients (behind one address): the signature
	// covers the authority the client addressed, A's here, whichever replica gets it.
	authority := strings.TrimPrefix(proxyA.URL, "https://")
	alice := awsSigner(t, awsExampleKeyID, awsExampleSecret, "us-east-1", nil)
	const wantAlice = "alice [developers system:authenticated]"
	var refused []string // audit IDs of requests that must not reach kube-apiserver
	id := func(name string) string {
		return fmt.Sprintf("kplug-e2e-resolver-%s-%d", strings.ReplaceAll(name, " ", "-"), time.Now().UnixNano())
	}

	replayID := id("replayed")
	replayed := signedReview(t, alice, authority, replayID)
	t.Run("replayed to the other replica", func(t *testing.T) {
		raw := replayed
		if a := sendRaw(t, cp, proxyA.URL, raw); a.code != http.StatusCreated || a.message != wantAlice {
			t.Fatalf("replica A: %+v; want 201 %s", a, wantAlice)
		}
		for _, replica := range []*sidecar{proxyB, proxyA} {
			a := sendRaw(t, cp, replica.URL, raw)
			t.Logf("replayed to %s: %d %s", replica.URL, a.code, a.message)
			if a.code != http.StatusUnauthorized || !strings.Contains(a.message, `signature "sig1" was already used`) {
				t.Errorf("replayed to %s: %+v; want 401 ...already used", replica.URL, a)
			}
		}
	})

	t.Run("resolver's key staged after the date", func(t *testing.T) {
		a := sendRaw(t, cp, proxyA.URL, signedReview(t, awsSigner(t, stagedKeyID, awsExampleSecret, "us-east-1", at), authority, id("staged")))
		if a.code != http.StatusCreated || a.message != "bob [system:authenticated]" {
			t.Errorf("%+v; want 201 bob [system:authenticated]", a)
		}
	})

	yesterday := time.Now().Add(-24 * time.Hour)
	ladder := httpsig.SigV4Ladder()
	yesterdaysKey, yesterdaysKeyID, err := ladder.Derive(awsExampleKeyID, []byte(awsExampleSecret), yesterday,
		map[string]string{"region": "us-east-1", "service": "kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	keyedYesterday, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     httpsig.Key{Secret: yesterdaysKey, KeyID: yesterdaysKeyID},
		Headers: map[string]string{httpsig.AudienceHeader: signatureAudience},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		signer *httpsig.Signer
		reason string
	}{
		{"key scoped to another region", awsSigner(t, awsExampleKeyID, awsExampleSecret, "us-west-2", nil),
			"the key derived for this signature's date and the resolver's scope is"},
		{"key id date is not the created date", keyedYesterday,
			"the key derived for this signature's date and the resolver's scope is"},
		{"expired created", awsSigner(t, awsExampleKeyID, awsExampleSecret, "us-east-1", func() time.Time { return time.Now().Add(-10 * time.Minute) }),
			"more than maxAge 2m0s plus maxClockSkew 5s"},
		{"key id prefix no resolver is configured for", awsSigner(t, "AKIDUNLISTEDEXAMPLE", awsExampleSecret, "us-east-1", nil),
			"no resolver's keyIDPrefixes names its first part"},
		{"key the resolver does not serve", awsSigner(t, awsUnservedKeyID, awsExampleSecret, "us-east-1", nil),
			"no resolver serves key"},
		{"wrong secret", awsSigner(t, awsExampleKeyID, "not-"+awsExampleSecret, "us-east-1", nil),
			"signature does not verify"},
		{"resolver's key staged for another day", awsSigner(t, staleStageKeyID, awsExampleSecret, "us-east-1", at),
			fmt.Sprintf("the key was derived for %q (step \"date\"), and the signature was created on %s", now.Add(-24*time.Hour).UTC().Format("20060102"), now.UTC().Format("20060102"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			auditID := id(tc.name)
			refused = append(refused, auditID)
			a := sendRaw(t, cp, proxyA.URL, signedReview(t, tc.signer, authority, auditID))
			t.Logf("%d %s", a.code, a.message)
			if a.code != http.StatusUnauthorized || !strings.HasPrefix(a.message, "Unauthorized: ") || !strings.Contains(a.message, tc.reason) {
				t.Errorf("%+v; want 401 Unauthorized: ...%s", a, tc.reason)
			}
		})
	}

	t.Run("resolver down", func(t *testing.T) {
		resolverB.Stop(10 * time.Second)
		if _, err := os.Stat(socketB); !os.IsNotExist(err) {
			t.Fatalf("the stopped resolver's socket: %v", err)
		}
		auditID := id("resolver down")
		refused = append(refused, auditID)
		a := sendRaw(t, cp, proxyB.URL, signedReview(t, alice, authority, auditID))
		t.Logf("%d (Retry-After: %s) %s", a.code, a.retryAfter, a.message)
		if a.code != http.StatusServiceUnavailable || a.retryAfter == "" || !strings.Contains(a.message, `authenticator "aws-access-keys"`) {
			t.Errorf("%+v; want 503 with Retry-After naming the authenticator", a)
		}

		// Back on the same socket, the replica serves again, as the 503 said it would;
		// the request replayed before is still refused: its nonce is etcd's, which the
		// restart did not lose.
		startResolverAt(t, cp, bin, "resolver-b-restarted", socketB, keys, etcdFlags...)
		poll.Until(t, "replica B to accept requests once its resolver is back", func() bool {
			a := sendRaw(t, cp, proxyB.URL, signedReview(t, alice, authority, id("resolver back")))
			if a.code != http.StatusCreated {
				time.Sleep(100 * time.Millisecond)
			}
			return a.code == http.StatusCreated && a.message == wantAlice
		})
		if a := sendRaw(t, cp, proxyB.URL, replayed); a.code != http.StatusUnauthorized || !strings.Contains(a.message, `signature "sig1" was already used`) {
			t.Errorf("replayed to B after its resolver restarted: %+v; want 401 ...already used", a)
		}
	})

	t.Run("etcd down", func(t *testing.T) {
		etcdURL, etcd := startNonceEtcd(t, cp)
		socket, _ := startResolver(t, cp, bin, "resolver-c", keys, "--nonce-store=etcd", "--etcd-endpoints="+etcdURL, "--call-timeout=2s")
		proxyC := startResolverProxy(t, cp, socket)
		if a := sendRaw(t, cp, proxyC.URL, signedReview(t, alice, authority, id("etcd up"))); a.code != http.StatusCreated || a.message != wantAlice {
			t.Fatalf("with etcd up: %+v; want 201 %s", a, wantAlice)
		}
		etcd.Stop(10 * time.Second)
		auditID := id("etcd down")
		refused = append(refused, auditID)
		a := sendRaw(t, cp, proxyC.URL, signedReview(t, alice, authority, auditID))
		t.Logf("%d (Retry-After: %s) %s", a.code, a.retryAfter, a.message)
		if a.code != http.StatusServiceUnavailable || a.retryAfter == "" || !strings.Contains(a.message, "the nonce could not be recorded") {
			t.Errorf("%+v; want 503 with Retry-After: the nonce could not be recorded", a)
		}
	})

	sentinel := id("sentinel")
	if a := sendRaw(t, cp, proxyA.URL, signedReview(t, alice, authority, sentinel)); a.code != http.StatusCreated {
		t.Fatalf("the sentinel request: %+v", a)
	}
	counts := auditCounts(t, auditLog, sentinel, append([]string{replayID}, refused...))
	if counts[replayID] != 1 {
		t.Errorf("kube-apiserver saw the replayed request %d times; want once", counts[replayID])
	}
	for _, id := range refused {
		if counts[id] != 0 {
			t.Errorf("kube-apiserver saw refused request %s", id)
		}
	}
}

// startNonceEtcd runs an etcd of its own for nonces, which a test may stop without
// stopping kube-apiserver's, and returns its client URL once it is healthy.
func startNonceEtcd(t *testing.T, cp *framework.ControlPlane) (string, *framework.Process) {
	t.Helper()
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	proc, err := cp.StartProcess("nonce-etcd", []string{filepath.Join(cp.BinDir, "etcd"),
		"--name=nonces", "--data-dir=" + filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer, "--initial-cluster=nonces=" + peer,
		"--log-level=warn", "--unsafe-no-fsync",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Stop(10 * time.Second) })
	poll.Until(t, "the nonce etcd to be healthy", func() bool {
		if !proc.Running() {
			t.Fatalf("etcd exited: %v\n%s", proc.Err(), proc.Tail(20))
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, client+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return regexp.MustCompile(`"health":\s*"true"`).Match(b)
	})
	return client, proc
}
