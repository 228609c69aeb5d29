package execcache

import (
	"fmt"
	"strconv"
)

// Client identifies the process that ran the wrapper: the client (kubectl, helm, a
// client-go program) runs an exec plugin as its direct child, so it is the wrapper's parent.
// Start is the process's start time as the operating system reports it, so that a new
// process that reuses the pid is a different client; it is empty where it cannot be read.
// The zero value is an unknown client, which is never taken to be calling again.
type Client struct {
	PID   int    `json:"pid"`
	Start string `json:"start,omitempty"`
}

// ClientOf identifies process pid, usually os.Getppid(). Pid 0 (the parent is outside
// the pid namespace) is an unknown client. Pid 1 is a client like any other: kubectl or a
// controller may run as a container's init, and a wrapper reparented to init after its
// client died has nobody to read its answer, so taking init for the client is harmless.
func ClientOf(pid int) Client {
	if pid <= 0 {
		return Client{}
	}
	start, err := processStart(pid)
	if err != nil {
		return Client{PID: pid}
	}
	return Client{PID: pid, Start: start}
}

// Known reports whether c identifies a process.
func (c Client) Known() bool { return c.PID > 0 }

func (c Client) String() string {
	if c.Start == "" {
		return "pid " + strconv.Itoa(c.PID)
	}
	return fmt.Sprintf("pid %d (started %s)", c.PID, c.Start)
}
