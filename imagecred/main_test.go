package imagecred

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/kplug/kplug/internal/testkit/exectest"
)

func TestMain(m *testing.M) {
	exectest.Main(nil) // provider plugins are exectest fakes: the test binary re-executed
	goleak.VerifyTestMain(m)
}
