package sigresolver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/httpsig/resolverapi"
	"github.com/kplug/kplug/internal/noncestore"
)

func keyFileWith(t *testing.T, path, keys string) {
	t.Helper()
	doc := `kind: SignatureResolverKeys
keyDerivation:
  kind: hmac-ladder
  hash: sha-256
  secretPrefix: AWS4
  steps:
  - {name: date, date: YYYYMMDD}
  - {name: region, scope: true}
  - {name: service, scope: true}
  - {name: terminator, literal: aws4_request}
cacheTTL: 30s
keys:
` + keys
	// Written beside and renamed over, as an operator should, so that the size or the
	// modification time changes atomically.
	if err := os.WriteFile(path+".new", []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// TestResolverOverGRPC serves a key file over the resolver protocol on a unix socket and
// asks for each kind of key, a key it does not have, and nonces; then edits the file
// (revoking a key) and a broken edit, which keeps the keys loaded.
func TestResolverOverGRPC(t *testing.T) {
	dir := t.TempDir()
	pub, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(pub.Public())
	pubPEM := strings.ReplaceAll(string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), "\n", "\n    ")
	path := filepath.Join(dir, "keys.yaml")
	keys := `- keyID: corp/laptop-7
  algorithm: ecdsa-p256-sha256
  publicKey: |
    ` + pubPEM + `
  user: {username: alice, groups: [dev]}
- keyID: corp/ci
  algorithm: hmac-sha256
  secretBase64: c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA==
  user: {username: ci-bot}
  cacheTTL: 0s
- keyID: AKIDEXAMPLE
  algorithm: hmac-sha256
  secretBase64: d0phbHJYVXRuRkVNSS9LN01ERU5HK2JQeFJmaUNZRVhBTVBMRUtFWQ==
  derived: true
  stage: {scope: {region: us-west-2, service: eks}}
  user: {username: bob, extra: {example.com/team: [a, b]}}
`
	keyFileWith(t, path, keys)
	r, err := New(path, noncestore.NewMemory(100, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "r.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	resolverapi.Register(s, r)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := resolverapi.NewClient(conn)
	ctx := t.Context()

	m, err := c.Metadata(ctx, &resolverapi.MetadataRequest{})
	if err != nil || m.GetKeyDerivation().GetSecretPrefix() != "AWS4" || len(m.GetKeyDerivation().GetSteps()) != 4 {
		t.Fatalf("Metadata = %v, %v", m, err)
	}
	resolve := func(keyID string) (*resolverapi.ResolveKeyResponse, error) {
		return c.ResolveKey(ctx, &resolverapi.ResolveKeyRequest{KeyId: keyID, Created: timestamppb.Now()})
	}
	if k, err := resolve("corp/laptop-7"); err != nil || string(k.GetPublicKey()) != string(der) || k.GetUser().GetUsername() != "alice" || k.GetCacheTtlSeconds() != 30 {
		t.Errorf("public key: %v, %v", k, err)
	}
	if k, err := resolve("corp/ci"); err != nil || string(k.GetSecret()) != "secret-secret-secret-secret-secret" || k.GetCacheTtlSeconds() != 0 {
		t.Errorf("secret: %v, %v", k, err)
	}
	// A derived key is sent staged at the last step that is not a literal, for the
	// signature's date: never the root secret (an AWS secret access key).
	created := time.Date(2026, 3, 15, 23, 59, 59, 0, time.UTC)
	k, err := c.ResolveKey(ctx, &resolverapi.ResolveKeyRequest{KeyId: "AKIDEXAMPLE/20260315/us-west-2/eks/aws4_request", Created: timestamppb.New(created)})
	ladder := httpsig.SigV4Ladder()
	want, _ := ladder.Rung([]byte("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"), "", "service", created, map[string]string{"region": "us-west-2", "service": "eks"})
	dk := k.GetDerivedKey()
	if err != nil || dk.GetFrom() != "service" || string(dk.GetKey()) != string(want) || len(dk.GetScope()) != 3 ||
		dk.GetScope()["date"] != "20260315" || dk.GetScope()["region"] != "us-west-2" || dk.GetScope()["service"] != "eks" ||
		k.GetUser().GetExtra()["example.com/team"].GetItems()[1] != "b" {
		t.Errorf("derived: %v, %v", k, err)
	}
	key, keyID, err := ladder.DeriveFrom("AKIDEXAMPLE", dk.GetKey(), "service", created, map[string]string{"region": "us-west-2", "service": "eks"})
	root, rootKeyID, _ := ladder.Derive("AKIDEXAMPLE", []byte("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"), created, map[string]string{"region": "us-west-2", "service": "eks"})
	if err != nil || string(key) != string(root) || keyID != rootKeyID {
		t.Errorf("the staged key folds to %x (%s), the root to %x (%s): %v", key, keyID, root, rootKeyID, err)
	}
	for _, unknown := range []string{"corp/other", "AKIDEXAMPLE", "corp/laptop-7/x", "AKIDOTHER/20260315/us-west-2/eks/aws4_request"} {
		if _, err := resolve(unknown); status.Code(err) != codes.NotFound {
			t.Errorf("ResolveKey(%q) = %v, want NotFound", unknown, err)
		}
	}
	exp := timestamppb.New(time.Now().Add(time.Minute))
	for i, want := range []bool{true, false} {
		n, err := c.ConsumeNonce(ctx, &resolverapi.ConsumeNonceRequest{KeyId: "corp/ci", Nonce: "n", ExpiresAt: exp})
		if err != nil || n.GetAccepted() != want {
			t.Errorf("ConsumeNonce #%d = %v, %v", i, n, err)
		}
	}
	if _, err := c.ConsumeNonce(ctx, &resolverapi.ConsumeNonceRequest{KeyId: "corp/ci", Nonce: "m"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ConsumeNonce without expires_at = %v", err)
	}

	// Revoked by editing the file: the next call no longer resolves it.
	keyFileWith(t, path, keys[strings.Index(keys, "- keyID: corp/ci"):])
	if _, err := resolve("corp/laptop-7"); status.Code(err) != codes.NotFound {
		t.Errorf("a key removed from the file still resolves: %v", err)
	}
	// A broken edit keeps what is loaded.
	keyFileWith(t, path, "- keyID: broken\n  algorithm: none\n")
	if _, err := resolve("corp/ci"); err != nil {
		t.Errorf("after a broken edit: %v", err)
	}
}

func TestKeyFileRefusals(t *testing.T) {
	for _, tc := range []struct{ keys, want string }{
		{"- {keyID: a, algorithm: hmac-sha256, secretBase64: cw==, user: {username: system:admin}}\n", "the system: prefix"},
		{"- {keyID: a, algorithm: hmac-sha256, secretBase64: cw==, user: {username: u, groups: [system:masters]}}\n", `"system:masters"`},
		{"- {keyID: a, algorithm: md5, user: {username: u}}\n", `algorithm "md5"`},
		{"- {keyID: a/b, algorithm: hmac-sha256, secretBase64: cw==, derived: true, user: {username: u}}\n", "may not contain"},
		{"- {keyID: a, algorithm: hmac-sha256, secretBase64: cw==, derived: true, stage: {from: zone}, user: {username: u}}\n", `stage.from "zone"`},
		{"- {keyID: a, algorithm: ed25519, secretBase64: cw==, user: {username: u}}\n", "asymmetric algorithm"},
		{"- {keyID: a, algorithm: hmac-sha256, secretBase64: cw==, user: {username: u}}\n- {keyID: a, algorithm: hmac-sha256, secretBase64: cw==, user: {username: v}}\n", "used twice"},
		{"- {keyID: a, algorithm: hmac-sha256, secretBase64: cw==, user: {username: u}, extraField: 1}\n", "unknown field"},
	} {
		path := filepath.Join(t.TempDir(), "keys.yaml")
		keyFileWith(t, path, tc.keys)
		if _, err := New(path, nil, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.keys, err, tc.want)
		}
	}
}

// TestKeyFileWritableByOthersRefused: whoever can write the key file names any user for any
// key (issue 31 review, F6).
func TestKeyFileWritableByOthersRefused(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("mode bits mean nothing on Windows")
	}
	path := filepath.Join(t.TempDir(), "keys.yaml")
	keyFileWith(t, path, "- {keyID: a, algorithm: hmac-sha256, secretBase64: cw==, user: {username: u}}\n")
	for mode, want := range map[os.FileMode]string{0o666: "is writable by group or others (mode -rw-rw-rw-)", 0o620: "is writable by group or others", 0o644: "", 0o600: ""} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := New(path, nil, nil)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("mode %v: %v, want %q", mode, err, want)
		}
	}
}
