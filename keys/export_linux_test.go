package keys

import "time"

// SetTPMCommandTimeout sets the deadline of each command on a TPM socket until the
// returned function restores it.
func SetTPMCommandTimeout(d time.Duration) (restore func()) {
	old := tpmCommandTimeout
	tpmCommandTimeout = d
	return func() { tpmCommandTimeout = old }
}
