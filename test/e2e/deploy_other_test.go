//go:build !linux

package e2e

import "testing"

// fileGroup is the group that owns path; the tests read it on Linux only.
func fileGroup(t *testing.T, _ string) int {
	t.Helper()
	t.Skip("file groups are checked on Linux")
	return -1
}
