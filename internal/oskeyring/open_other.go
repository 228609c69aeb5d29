//go:build !linux && !darwin && !windows

package oskeyring

import (
	"context"
	"fmt"
	"runtime"
)

func open(_ context.Context, name string, _ *Config) (Keyring, error) {
	return nil, fmt.Errorf("oskeyring: kplug has no OS keyring on %s (asked for %s); use --storage file or none", runtime.GOOS, name)
}
