package execcache

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

// BenchmarkRunHit is the wrapper's own work when it serves a stored answer: key, lock,
// read, check, record the client, write, print. Each iteration is another client, so each
// records itself in the entry, as separate kubectl processes do.
func BenchmarkRunHit(b *testing.B) { benchmarkRunHit(b, "", nil) }

// benchmarkRunHit is BenchmarkRunHit with answers in storage, and env for the wrapper.
func benchmarkRunHit(b *testing.B, storage string, env []string) {
	dir := b.TempDir()
	p := exectest.New(b).Stdout(answerTemplate(""))
	info, err := (&wire.Info{APIVersion: wire.V1}).Encode()
	if err != nil {
		b.Fatal(err)
	}
	var out bytes.Buffer
	o := Options{
		Command: os.Args[0], Args: []string{"-test.run=^$"}, Dir: filepath.Join(dir, "cache"), DefaultTTL: time.Hour,
		Storage: storage,
		Environ: append(append(append(os.Environ(), p.Env()...), env...), wire.InfoEnv+"="+string(info)),
		Stdout:  &out, Stderr: &out,
	}
	if err := Run(b.Context(), o); err != nil { // the miss that fills the cache
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = Clear(context.WithoutCancel(b.Context()), o.Dir, o.Environ, "", nil) }) // keyrings outlive the test
	pid := 1000
	for b.Loop() {
		pid++
		o.Client = Client{PID: pid % 100000, Start: "1"}
		out.Reset()
		if err := Run(b.Context(), o); err != nil || out.Len() == 0 {
			b.Fatalf("%v: %q", err, out.String())
		}
	}
	if runs := p.Runs(); runs != 1 {
		b.Fatalf("the plugin ran %d times, want 1", runs)
	}
}
