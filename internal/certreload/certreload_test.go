package certreload

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

// pair writes a certificate for cn and its key as dir/tls.crt and dir/tls.key.
func pair(t *testing.T, dir string, ca *testpki.CA, cn string) {
	t.Helper()
	kp, err := ca.IssueClient(cn, cn)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "tls.crt"), kp.CertPEM)
	write(t, filepath.Join(dir, "tls.key"), kp.KeyPEM)
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func cn(t *testing.T, c *Certificate) string {
	t.Helper()
	cert, err := c.Get()
	if err != nil {
		t.Fatal(err)
	}
	return cert.Leaf.Subject.CommonName
}

func TestFilesReloadByContent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewTestCA(t, "ca")
	pair(t, dir, ca, "first")
	clk := &clock{now: time.Now()}
	src := Files(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	src.Now, src.MinInterval = clk.Now, time.Second
	c, err := New(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := cn(t, c); got != "first" {
		t.Fatalf("loaded %q", got)
	}
	// Same size, same file times: only the content tells the rotation apart.
	info, _ := os.Stat(filepath.Join(dir, "tls.crt"))
	pair(t, dir, ca, "secnd")
	_ = os.Chtimes(filepath.Join(dir, "tls.crt"), info.ModTime(), info.ModTime())
	if got := cn(t, c); got != "first" {
		t.Errorf("read again within MinInterval: %q", got)
	}
	clk.now = clk.now.Add(time.Second)
	if got := cn(t, c); got != "secnd" {
		t.Errorf("after rotation: %q, want secnd", got)
	}
	if gen, rotated := c.Rotation(); gen != 1 || !rotated.Equal(clk.now) {
		t.Errorf("Rotation = %d, %v", gen, rotated)
	}
	// A certificate whose key is not written yet keeps the last good one, and is tried
	// again a second later.
	kp, err := ca.IssueClient("third", "third")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "tls.crt"), kp.CertPEM)
	clk.now = clk.now.Add(time.Second)
	if got := cn(t, c); got != "secnd" {
		t.Errorf("with the old key: %q, want the previous certificate", got)
	}
	write(t, filepath.Join(dir, "tls.key"), kp.KeyPEM)
	clk.now = clk.now.Add(time.Second)
	if got := cn(t, c); got != "third" {
		t.Errorf("once the key came: %q, want third", got)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewTestCA(t, "ca")
	pair(t, dir, ca, "alice")
	if _, err := New(Files(filepath.Join(dir, "missing.crt"), filepath.Join(dir, "tls.key"))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing certificate: %v", err)
	}
	_, err := New(Files(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "missing.key")))
	var unusable *UnusableError
	if !errors.As(err, &unusable) || !strings.Contains(err.Error(), "missing.key") {
		t.Errorf("missing key: %v", err)
	}
	src := Files(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	src.Check = func(leaf *x509.Certificate) error { return errors.New("not for " + leaf.Subject.CommonName) }
	if _, err := New(src); err == nil || err.Error() != filepath.Join(dir, "tls.crt")+": not for alice" {
		t.Errorf("refused by Check: %v", err)
	}
}

func TestWatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewTestCA(t, "ca")
	pair(t, dir, ca, "first")
	c, err := New(Files(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	rotated := c.Watch(ctx, 10*time.Millisecond)
	before, _ := os.ReadFile(filepath.Join(dir, "tls.crt"))
	pair(t, dir, ca, "second")
	if after, _ := os.ReadFile(filepath.Join(dir, "tls.crt")); bytes.Equal(before, after) {
		t.Fatal("the test wrote the same certificate")
	}
	select {
	case <-rotated:
	case <-time.After(30 * time.Second):
		t.Fatal("no signal after a rotation")
	}
	cancel()
	for range rotated { // closed when ctx ends
	}
}
