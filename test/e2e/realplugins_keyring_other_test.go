//go:build !linux

package e2e

import "testing"

// keepKubeloginKeyring: kubelogin's token cache uses the kernel keyring only on Linux.
func keepKubeloginKeyring(*testing.T) {}
