package e2e

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// msalKeyDescription is the kernel key in which Azure SDK's persistent token cache (and so
// kubelogin) keeps the key that encrypts its cache file, in the user's persistent keyring
// (or the user keyring where there is none).
const msalKeyDescription = "msal.cache"

// keepKubeloginKeyring removes, when the test ends, the key kubelogin's token cache adds to
// the user's keyring, unless it was there before the test (a real kubelogin user's).
// Otherwise each run of the tests as root would leave one behind until reboot.
func keepKubeloginKeyring(t *testing.T) {
	t.Helper()
	before := msalKeys()
	t.Cleanup(func() {
		for ring, key := range msalKeys() {
			if before[ring] == key {
				continue
			}
			// A search finds keys in nested keyrings too (the persistent keyring is linked
			// into the user keyring): unlink the key from where it is linked.
			if _, err := unix.KeyctlInt(unix.KEYCTL_UNLINK, key, ring, 0, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				t.Logf("removing kubelogin's key %d from keyring %d: %v", key, ring, err)
			}
		}
	})
}

// msalKeys returns the msal.cache key of each of the user's keyrings that holds one.
func msalKeys() map[int]int {
	keys := map[int]int{}
	user, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_USER_KEYRING, false)
	if err != nil {
		return keys
	}
	rings := []int{user}
	if persistent, err := unix.KeyctlInt(unix.KEYCTL_GET_PERSISTENT, -1, user, 0, 0); err == nil {
		rings = append(rings, persistent)
	}
	for _, ring := range rings {
		if key, err := unix.KeyctlSearch(ring, "user", msalKeyDescription, 0); err == nil {
			keys[ring] = key
		}
	}
	return keys
}
