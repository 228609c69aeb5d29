package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/kplug/kplug/internal/filelock"
	"github.com/kplug/kplug/internal/privdir"
)

// lockPoll is how often Serve checks whether its client is gone.
const lockPoll = 200 * time.Millisecond

// openClientLock opens the client's lock file, once: the proxy watches that file, not
// the path, so it never creates a lock file, a client that removes its lock file on exit
// does not get it back, and a lock file unlinked while its client lives does not end the
// proxy early. The file must be a regular file (not a link, FIFO or directory) that
// another open holds locked: the lock is the proxy's only sign of its client's life.
// Descriptors of the lock this process inherited from a client that leaked them are
// closed first, since with one open the lock would outlive the client.
func openClientLock(path string, log *slog.Logger) (*os.File, error) {
	f, err := privdir.Open(path)
	if err != nil {
		return nil, fmt.Errorf("exec proxy: spec.lockFilePath: %w; the client must create its lock file and hold an exclusive flock on it before it runs the plugin", err)
	}
	closeInherited(f, log)
	free, err := filelock.TryRLock(f)
	if err == nil && free {
		err = fmt.Errorf("exec proxy: spec.lockFilePath %s is not locked: the client must hold an exclusive flock on it for as long as it lives, or the proxy cannot tell when to exit", path)
	} else if err != nil {
		err = fmt.Errorf("exec proxy: locking spec.lockFilePath %s: %w", path, err)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// waitForClientExit cancels ctx once a shared lock on f can be taken: the client holds an
// exclusive one for as long as it lives, and the kernel releases it when the client dies.
// A shared lock needs the file open only for reading, also over NFS.
func waitForClientExit(ctx context.Context, f *os.File, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(lockPoll)
	defer tick.Stop()
	for {
		ok, err := filelock.TryRLock(f)
		switch {
		case ok:
			_ = filelock.Unlock(f)
			cancel(errClientGone)
			return
		case err != nil:
			cancel(fmt.Errorf("exec proxy: watching the client's lock file %s: %w", f.Name(), err))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
