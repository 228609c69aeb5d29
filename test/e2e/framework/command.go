package framework

import (
	"path/filepath"
	"time"
)

// Process is a program a test runs beside the control plane (a kplug sidecar, say), in a
// process group of its own that dies with the test process, its output in a log file of
// the control plane's directory. ControlPlane.Stop stops it before the apiservers.
type Process struct {
	proc *process
}

// StartProcess starts argv as name, with env as its environment (nil: the test process's),
// and returns at once; the test waits for whatever readiness it needs.
func (cp *ControlPlane) StartProcess(name string, argv, env []string) (*Process, error) {
	p, err := StartCommand(name, filepath.Join(cp.Dir, name+".log"), argv, env)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.processes = append(cp.processes, p)
	cp.mu.Unlock()
	return p, nil
}

// StartCommand starts argv as name in a process group of its own, its output in
// logPath, with env as its environment (nil: the test process's), outside any control
// plane: the caller stops it. It returns at once.
func StartCommand(name, logPath string, argv, env []string) (*Process, error) {
	proc, err := startProcessEnv(name, logPath, argv, env)
	if err != nil {
		return nil, err
	}
	return &Process{proc: proc}, nil
}

// Stop sends SIGTERM, then SIGKILL after grace, and waits until the process is reaped.
// Calling it again is harmless.
func (p *Process) Stop(grace time.Duration) { p.proc.stop(grace) }

// Kill kills the process group with SIGKILL and waits for the process.
func (p *Process) Kill() { p.proc.kill() }

// Pause stops the process group (SIGSTOP); Resume continues it.
func (p *Process) Pause() error { return p.proc.pause() }

// Resume continues a paused process (SIGCONT).
func (p *Process) Resume() error { return p.proc.resume() }

// Running reports whether the process is still alive.
func (p *Process) Running() bool { return p.proc.running() }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.proc.done }

// Err describes how the process ended (nil while it runs or after a clean exit).
func (p *Process) Err() error {
	if p.proc.running() || p.proc.waitErr == nil {
		return nil
	}
	return p.proc.exitError()
}

// PID is the process ID.
func (p *Process) PID() int { return p.proc.cmd.Process.Pid }

// LogPath is the file holding its stdout and stderr.
func (p *Process) LogPath() string { return p.proc.logPath }

// Tail returns the last n lines of its log.
func (p *Process) Tail(n int) string { return p.proc.tail(n) }
