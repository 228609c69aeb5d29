//go:build linux

package localuser

import (
	"strconv"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	u := New(t)
	got := strings.TrimSpace(u.Sh(t, "id -u"))
	if got != strconv.Itoa(u.UID) {
		t.Fatalf("id -u as %s = %q, want %d", u, got, u.UID)
	}
	u.Sh(t, "touch \"$HOME/x\"")
}
