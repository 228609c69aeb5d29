// Package poll waits in tests for what happens on its own time: a background refresh, a
// process that starts or exits, a Lease that appears. One helper, so that every test
// waits the same way and a broken test fails instead of hanging.
package poll

import (
	"testing"
	"time"
)

// Timeout bounds every wait; it only keeps a broken test from hanging.
const Timeout = 30 * time.Second

// Until calls cond every few milliseconds until it returns true, and fails t, naming what
// it waited for, if that takes longer than Timeout.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", Timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
