package execcache

import (
	"testing"

	"github.com/kplug/kplug/internal/testkit/keyringtest"
)

// BenchmarkRunHitStorage is BenchmarkRunHit for each storage, side by side: what a warm
// hit costs with its answer in a file, the kernel keyring or the Secret Service
// (gnome-keyring-daemon on a private bus).
func BenchmarkRunHitStorage(b *testing.B) {
	b.Run(StorageFile, func(b *testing.B) { benchmarkRunHit(b, StorageFile, nil) })
	b.Run(StorageKernelKeyring, func(b *testing.B) {
		benchmarkRunHit(b, StorageKernelKeyring, nil)
	})
	b.Run(StorageSecretService, func(b *testing.B) {
		ss := keyringtest.StartSecretService(b)
		benchmarkRunHit(b, StorageSecretService, ss.Env)
	})
}
