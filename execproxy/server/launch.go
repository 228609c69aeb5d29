package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kplug/kplug/internal/privdir"
)

// answerTimeout bounds the wait for a daemon's answer: it has checked its options and
// listens within a second or two, unless something is wrong (a PKCS#11 token that hangs).
const answerTimeout = 30 * time.Second

// maxAnswer bounds the answer a launcher relays (it holds about 3 KiB).
const maxAnswer = 1 << 20

// launch starts p.DaemonPath, or this executable again, as a detached daemon
// (p.DaemonArgs), hands it p.Args on stdin, waits for its answer and writes it to
// p.Stdout. The daemon's log goes beside the client's lock file, once that directory is
// known to be the user's own and closed to other users' writes, and never through a link.
func launch(ctx context.Context, p Process, lockFile string) error {
	self := p.DaemonPath
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return err
		}
	}
	if err := privdir.Verify(filepath.Dir(lockFile)); err != nil {
		return fmt.Errorf("exec proxy: spec.lockFilePath %s: %w; the client must keep its lock file in a directory of its own that other users cannot write to", lockFile, err)
	}
	logFile, err := privdir.Replace(lockFile + ".log")
	if err != nil {
		return fmt.Errorf("exec proxy: the proxy's log: %w", err)
	}
	defer logFile.Close()
	// The daemon outlives this launcher by design, so no context may kill it. Its
	// arguments, secrets among them, reach it on stdin, not on its command line.
	cmd := exec.Command(self, p.DaemonArgs...) //nolint:gosec,noctx // ourselves or our checked build, detached
	cmd.Stderr = logFile
	detach(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec proxy: starting the proxy: %w", err)
	}
	// Written while the answer is awaited, so that a daemon that never reads them (a large
	// argument list fills the pipe) is bounded by answerTimeout too (issue 33 review, I5).
	go func() {
		_ = json.NewEncoder(stdin).Encode(p.Args) // a daemon that cannot read them says so in its log
		_ = stdin.Close()
	}()
	// The answer is complete when the daemon closes stdout, after printing it or by dying.
	answer := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(stdout, maxAnswer))
		answer <- b
	}()
	timer := time.NewTimer(answerTimeout)
	defer timer.Stop()
	var b []byte
	select {
	case b = <-answer:
	case <-timer.C:
		_ = cmd.Process.Kill()
		return fmt.Errorf("exec proxy: the proxy did not answer within %v; see %s.log", answerTimeout, lockFile)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return ctx.Err()
	}
	if len(bytes.TrimSpace(b)) == 0 {
		_ = cmd.Wait() // it has exited: reap it
		logTail, _ := privdir.ReadFile(lockFile+".log", 64<<10)
		return fmt.Errorf("exec proxy: the proxy exited without answering: %s", strings.TrimSpace(string(logTail)))
	}
	_ = cmd.Process.Release()
	_, err = p.Stdout.Write(b)
	return err
}
