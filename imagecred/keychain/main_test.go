package keychain_test

import (
	"os"
	"testing"

	"github.com/kplug/kplug/internal/testkit/exectest"
)

func TestMain(m *testing.M) {
	exectest.Main(nil) // provider plugins are exectest fakes: the test binary re-executed
	os.Exit(m.Run())
}
