package framework

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// process is a control-plane binary running in its own process group, with its output in
// a log file. On Linux it is also killed if the test process dies (PR_SET_PDEATHSIG).
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited and been reaped
	waitErr error
}

func startProcess(name, logPath string, argv []string) (*process, error) {
	return startProcessEnv(name, logPath, argv, nil)
}

// startProcessEnv is startProcess with env as the environment (nil: this process's).
func startProcessEnv(name, logPath string, argv, env []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	// The process lives until stop, not for the length of some request's context.
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:noctx // stopped by stop(), see above
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = env
	if err := configureProcess(cmd); err != nil {
		_ = logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM to the process group, waits up to grace, then sends SIGKILL and waits
// for the process to be reaped. Calling stop again is harmless.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.done:
		signalGroup(p.cmd.Process, true) // anything the process left behind
		return
	default:
	}
	signalGroup(p.cmd.Process, false)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	signalGroup(p.cmd.Process, true)
	<-p.done
}

// kill sends SIGKILL to the process group at once and waits until the process is reaped:
// a crash, with no shutdown of any kind.
func (p *process) kill() {
	signalGroup(p.cmd.Process, true)
	<-p.done
}

// pause stops the process group (SIGSTOP): its sockets still accept connections, which
// the kernel completes, but nothing is ever answered. resume continues it (SIGCONT).
func (p *process) pause() error  { return pauseGroup(p.cmd.Process, true) }
func (p *process) resume() error { return pauseGroup(p.cmd.Process, false) }

func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// exitError describes how the process ended, for error messages.
func (p *process) exitError() error {
	if p.waitErr == nil {
		return fmt.Errorf("%s exited", p.name)
	}
	return fmt.Errorf("%s: %w", p.name, p.waitErr)
}

// tail returns the last n lines of the process log.
func (p *process) tail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if err := s.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		lines = append(lines, "(reading log: "+err.Error()+")")
	}
	return strings.Join(lines, "\n")
}
