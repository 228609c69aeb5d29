// Package peercred asks the kernel who is at the other end of a unix socket connection:
// the check that counts when a path could have been swapped between the moment it was
// checked and the moment it was dialled (the TPM socket, a resolver's socket).
package peercred

import (
	"errors"
	"fmt"
	"net"
	"os"
)

// Cred is the process at the other end of a connection, as the kernel recorded it when the
// connection was made.
type Cred struct {
	PID int32
	UID uint32
}

// ErrUnsupported is returned where the platform cannot say who the peer is.
var ErrUnsupported = errors.New("peercred: the peer's credentials cannot be read on this platform")

// CheckOwnerOrRoot accepts a connection whose peer runs as the effective user or as root.
func CheckOwnerOrRoot(conn net.Conn) error {
	c, err := Of(conn)
	if err != nil {
		return fmt.Errorf("reading who listens on it: %w", err)
	}
	if uid := os.Geteuid(); int64(c.UID) != int64(uid) && c.UID != 0 {
		return fmt.Errorf("the process listening on it (pid %d) belongs to uid %d, not to this user (uid %d) or root", c.PID, c.UID, uid)
	}
	return nil
}
