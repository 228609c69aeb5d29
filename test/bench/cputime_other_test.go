//go:build !unix

package bench

import "time"

// processCPU is not measured here: getrusage is a unix call.
func processCPU() (time.Duration, bool) { return 0, false }
