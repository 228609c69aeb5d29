package bench

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/httpsig/resolverapi"
	"github.com/kplug/kplug/httpsig/verifier"
	"github.com/kplug/kplug/internal/noncestore"
	"github.com/kplug/kplug/internal/sigresolver"
	"github.com/kplug/kplug/test/e2e/framework"
)

// The HMAC keys of the resolver rows: a shared secret, and AWS's published example secret
// access key on the SigV4 ladder, as kplug proxy-plugin --sign-key-derivation aws signs.
const (
	benchSecretKeyID = "bench-hmac"
	benchAccessKeyID = "AKIDEXAMPLE"
	benchAWSSecret   = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
)

var (
	benchSecret = []byte("0123456789abcdef0123456789abcdef")
	benchScope  = map[string]string{"region": "us-west-2", "service": "eks"}
)

// resolverSetup is kplug's reference resolver (internal/sigresolver, what kplug
// signature-resolver serves) over gRPC on unix sockets in a private directory, serving a
// key file with both keys: one recording nonces in memory, and one recording them in a
// real etcd when the binaries are there.
type resolverSetup struct {
	dir                      string
	memorySocket, etcdSocket string // etcdSocket is empty without etcd
}

func newResolverSetup(b *testing.B) *resolverSetup {
	b.Helper()
	dir := b.TempDir() // 0700, ours: what the verifier requires of the socket's directory
	ladder, err := json.Marshal(httpsig.SigV4Ladder())
	if err != nil {
		b.Fatal(err)
	}
	scope, _ := json.Marshal(benchScope)
	user := `user: {username: alice, groups: [developers]}`
	keys := filepath.Join(dir, "keys.yaml")
	file := fmt.Sprintf(`kind: SignatureResolverKeys
keyDerivation: %s
cacheTTL: 1h
keys:
- {keyID: %s, algorithm: hmac-sha256, secretBase64: %s, %s}
- {keyID: %s, algorithm: hmac-sha256, secretBase64: %s, derived: true, stage: {scope: %s}, %s}
`, ladder, benchSecretKeyID, base64.StdEncoding.EncodeToString(benchSecret), user,
		benchAccessKeyID, base64.StdEncoding.EncodeToString([]byte(benchAWSSecret)), scope, user)
	if err := os.WriteFile(keys, []byte(file), 0o600); err != nil {
		b.Fatal(err)
	}
	s := &resolverSetup{dir: dir, memorySocket: filepath.Join(dir, "memory.sock")}
	serveResolver(b, keys, s.memorySocket, noncestore.NewMemory(50_000_000, nil))
	if _, err := framework.FindBinDir(); err != nil && os.Getenv(framework.RequireEnv) == "" {
		b.Logf("no etcd row: %v", err)
		return s
	}
	etcd, err := noncestore.DialEtcd(b.Context(), []string{framework.StartEtcdForTest(b)}, "/kplug-bench/nonces/", 5*time.Second, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = etcd.Close() })
	s.etcdSocket = filepath.Join(dir, "etcd.sock")
	serveResolver(b, keys, s.etcdSocket, etcd)
	return s
}

// serveResolver serves the key file on socket, with nonces, until the benchmark ends.
func serveResolver(b *testing.B, keys, socket string, nonces sigresolver.NonceStore) {
	b.Helper()
	r, err := sigresolver.New(keys, nonces, nil)
	if err != nil {
		b.Fatal(err)
	}
	l, err := (&net.ListenConfig{}).Listen(b.Context(), "unix", socket)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	resolverapi.Register(srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	b.Cleanup(func() {
		srv.Stop()
		<-done
	})
}

// authenticator is a verifier with one resolver authenticator on socket (maxAge 1h, as the
// certificate rows' authenticator, so that a reused signature stays acceptable for the
// whole run), with nonceHandling and, when not empty, the resolver cache's maxAge.
func (s *resolverSetup) authenticator(b *testing.B, socket, nonceHandling, cacheMaxAge string) *verifier.Authenticator {
	b.Helper()
	cache := ""
	if cacheMaxAge != "" {
		cache = "\n      cache: {maxAge: " + cacheMaxAge + "}"
	}
	cfg, err := verifier.ParseConfig([]byte(`apiVersion: apiserver.config.k8s.io/v1alpha1
kind: AuthenticationConfiguration
httpSignature:
  requiredSignedHeaders:
    X-K8s-Audience: [`+sigAudience+`]
  authenticators:
  - name: resolver
    maxAge: 1h
    resolver:
      endpoint: unix://`+socket+`
      nonceHandling: `+nonceHandling+cache+`
    userValidationRules:
    - expression: '!user.username.startsWith("system:")'
      message: no system names
`), "", nil)
	if err != nil {
		b.Fatal(err)
	}
	a := verifier.New(cfg, verifier.Options{})
	b.Cleanup(func() { _ = a.Close() })
	if err := a.Check(b.Context()); err != nil {
		b.Fatal(err)
	}
	return a
}

var (
	secretKey = httpsig.Key{Secret: benchSecret, KeyID: benchSecretKeyID}
	sigv4Key  = httpsig.Key{Secret: []byte(benchAWSSecret), Derivation: &httpsig.Derivation{
		Ladder: httpsig.SigV4Ladder(), Name: benchAccessKeyID, Scope: benchScope}}
)

// cpuMeter counts the CPU time the process uses while it runs (where processCPU can tell):
// on a shared machine, wall time per request swells with other tenants' load, and more on
// the loopback path (goroutine and socket handoffs) than on the verification (hashing), so
// ratios of wall times flatter the verifier; CPU time swells much less. In process, it
// covers the client, the proxy, the upstream and the resolver, but not etcd.
type cpuMeter struct {
	used, start time.Duration
}

func (m *cpuMeter) resume() { m.start, _ = processCPU() }

func (m *cpuMeter) pause() {
	now, _ := processCPU()
	m.used += now - m.start
}

// report adds cpu-µs/op to b's results.
func (m *cpuMeter) report(b *testing.B) {
	if _, ok := processCPU(); ok && b.N > 0 {
		b.ReportMetric(float64(m.used.Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	}
}

// measure runs op in b.Loop, timed and metered, after one untimed call (which fills the
// resolver cache, where there is one).
func measure(b *testing.B, meter *cpuMeter, op func()) {
	op()
	meter.used = 0 // what the untimed call spent, batches of signatures included
	meter.resume()
	for b.Loop() {
		op()
	}
	meter.pause()
	meter.report(b)
}

// freshSignatures hands out a new signature for every request, made in batches with the
// timer and the meter stopped: a row whose verifier consumes nonces cannot reuse one, and
// must measure the verification, not the signing.
type freshSignatures struct {
	key   httpsig.Key
	meter *cpuMeter
	batch []http.Header
}

func (f *freshSignatures) next(b *testing.B) http.Header {
	if len(f.batch) == 0 {
		b.StopTimer()
		f.meter.pause()
		for range 1024 {
			f.batch = append(f.batch, signedWith(b, f.key))
		}
		f.meter.resume()
		b.StartTimer()
	}
	h := f.batch[0]
	f.batch = f.batch[1:]
	return h
}

// hmacRow is one way of authenticating an HMAC-signed request through a resolver.
type hmacRow struct {
	name    string
	auth    *verifier.Authenticator
	headers func(b *testing.B) http.Header
	meter   *cpuMeter
}

// hmacRows are the rows both resolver benchmarks compare:
//   - hmac-secret, hmac-sigv4: a shared secret, and a key the verifier derives down the
//     SigV4 ladder for each request from the root secret the resolver returns; the resolver
//     cache warm (the first request fills it, before timing), nonces not recorded
//     (nonceHandling Ignore), one signature reused, as the certificate rows do;
//   - hmac-sigv4-cold: the resolver cache off (cache maxAge 0s), so that every request
//     asks the resolver (ResolveKey over the socket; its Metadata, the ladder, stays
//     known);
//   - hmac-sigv4-fresh: a new signature every request, nonces not recorded: the floor of
//     the nonce rows;
//   - hmac-sigv4-nonce-memory, hmac-sigv4-nonce-etcd: the same with nonceHandling Consume,
//     the resolver recording each nonce in its memory, or in etcd.
func hmacRows(b *testing.B) []hmacRow {
	b.Helper()
	s := newResolverSetup(b)
	secretSigned, sigv4Signed := signedWith(b, secretKey), signedWith(b, sigv4Key)
	reuse := func(h http.Header) func(*testing.B) http.Header { return func(*testing.B) http.Header { return h } }
	rows := []hmacRow{
		{name: "hmac-secret", auth: s.authenticator(b, s.memorySocket, verifier.NonceIgnore, ""), headers: reuse(secretSigned)},
		{name: "hmac-sigv4", auth: s.authenticator(b, s.memorySocket, verifier.NonceIgnore, ""), headers: reuse(sigv4Signed)},
		{name: "hmac-sigv4-cold", auth: s.authenticator(b, s.memorySocket, verifier.NonceIgnore, "0s"), headers: reuse(sigv4Signed)},
		{name: "hmac-sigv4-fresh", auth: s.authenticator(b, s.memorySocket, verifier.NonceIgnore, "")},
		{name: "hmac-sigv4-nonce-memory", auth: s.authenticator(b, s.memorySocket, verifier.NonceConsume, "")},
	}
	if s.etcdSocket != "" {
		rows = append(rows, hmacRow{name: "hmac-sigv4-nonce-etcd", auth: s.authenticator(b, s.etcdSocket, verifier.NonceConsume, "")})
	}
	for i := range rows { // each its own signatures: a nonce consumed by one row would refuse another's
		rows[i].meter = &cpuMeter{}
		if rows[i].headers == nil {
			f := &freshSignatures{key: sigv4Key, meter: rows[i].meter}
			rows[i].headers = f.next
		}
	}
	return rows
}

// BenchmarkSignatureProxyResolver: the HMAC path of issue 31 against the unauthenticated
// one, all through the same verifier.Handler to one upstream over loopback HTTP, as
// BenchmarkSignatureProxy compares the certificate path (hmacRows says what each row is).
func BenchmarkSignatureProxyResolver(b *testing.B) {
	upstream, newHandler := loopbackUpstream(b)
	defer upstream.Close()
	unsigned := http.Header{"Accept": {"application/json"}}
	rows := append([]hmacRow{{name: "unauthenticated", headers: func(*testing.B) http.Header { return unsigned }, meter: &cpuMeter{}}}, hmacRows(b)...)
	for _, row := range rows {
		var h http.Handler
		if row.auth == nil {
			h = newHandler(fixedUser{&authenticationv1.UserInfo{Username: "alice", Groups: []string{"developers"}}})
		} else {
			h = newHandler(row.auth)
		}
		b.Run(row.name, func(b *testing.B) {
			measure(b, row.meter, func() { serveOnce(b, h, row.headers(b)) })
		})
	}
}

// BenchmarkSignatureAuthenticationResolver is the authentication step of the same rows
// alone, without the proxy.
func BenchmarkSignatureAuthenticationResolver(b *testing.B) {
	for _, row := range hmacRows(b) {
		b.Run(row.name, func(b *testing.B) {
			measure(b, row.meter, func() {
				if _, err := row.auth.Authenticate(targetRequest(row.headers(b))); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
