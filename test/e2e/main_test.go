package e2e

import (
	"os"
	"sync"
	"testing"
)

// TestMain removes what tests shared for the whole run (sharedDir) once they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// shared is a directory for what several tests of one run use, such as the release
// binary, built once: a test's t.TempDir ends with the test.
var shared struct {
	once sync.Once
	dir  string
	err  error
}

func sharedDir() (string, error) {
	shared.once.Do(func() { shared.dir, shared.err = os.MkdirTemp("", "kplug-e2e-shared") })
	return shared.dir, shared.err
}
