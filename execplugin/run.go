package execplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// Defaults used where a Runner or Command field is zero.
const (
	DefaultMaxOutput  = 4 << 20 // bytes of stdout kept; more is an error
	DefaultStderrTail = 8 << 10 // bytes of stderr kept for error messages
	DefaultKillGrace  = 2 * time.Second
)

// Command is one plugin invocation.
type Command struct {
	// Path is the command as configured: an absolute path, a path relative to BaseDir
	// (anything with a path separator in it), or a bare name looked up in PATH.
	Path string
	Args []string
	// BaseDir anchors relative paths, e.g. the kubeconfig's directory or a plugin bin dir.
	// Empty means the working directory.
	BaseDir string
	// Env entries (NAME=VALUE) override the host environment.
	Env []string
	// Reserved entries (NAME=VALUE) override everything, e.g. KUBERNETES_EXEC_INFO.
	Reserved []string
	// InstallHint is returned in a NotFoundError for the caller to show.
	InstallHint string
	Stdin       Stdin
	// Timeout, if positive, bounds the run; the plugin's process group is then killed.
	Timeout time.Duration
	// MaxOutput caps stdout in bytes; zero means DefaultMaxOutput.
	MaxOutput int
	// AnswerAtEOF lets the plugin keep running after it has written its answer and closed
	// stdout, as an exec proxy that is its own proxy does: Run returns once stdout is
	// closed and the plugin has exited or is still running after Runner.KillGrace. A plugin
	// still running is left alone and reaped in the background when it exits.
	AnswerAtEOF bool
}

// Result is what a successful run produced.
type Result struct {
	Stdout   []byte
	Stderr   string // the last DefaultStderrTail bytes of stderr
	Path     string // the executable that ran
	Duration time.Duration
}

// Status classifies how a run ended, for metrics.
type Status string

// The statuses a Call can carry.
const (
	StatusOK             Status = "ok"
	StatusExitError      Status = "exit_error" // non-zero exit or death by signal
	StatusTimeout        Status = "timeout"
	StatusCanceled       Status = "canceled"
	StatusNotFound       Status = "not_found"
	StatusNotExecutable  Status = "not_executable"
	StatusEnvTooLarge    Status = "env_too_large"
	StatusOutputTooLarge Status = "output_too_large"
	StatusOutputHeld     Status = "output_held"
	StatusInternal       Status = "internal_error" // invalid input or an unexpected OS error
)

// Call describes one finished run, for a metrics hook.
type Call struct {
	Command  string
	Path     string
	Status   Status
	ExitCode int // -1 unless the plugin exited by itself
	Started  bool
	Duration time.Duration
}

// Runner runs plugins. The zero value is ready to use; a Runner is safe for concurrent use
// as long as its fields are not changed.
type Runner struct {
	// Environ returns the host environment; nil means os.Environ.
	Environ func() []string
	// Stderr receives the plugin's stderr as it is written; nil means os.Stderr.
	// Use io.Discard to hide it.
	Stderr io.Writer
	// StderrShown says that Stderr reaches whoever reads the errors Run returns (a CLI
	// that prints both to one terminal), so that error messages do not repeat the stderr
	// tail; the errors' Stderr fields keep it.
	StderrShown bool
	// KillGrace is the time between SIGTERM and SIGKILL, and how long stdout may stay open
	// after the plugin exits; zero means DefaultKillGrace.
	KillGrace time.Duration
	// Observe, if set, is called once per Run with its outcome.
	Observe func(Call)
}

var errTimedOut = errors.New("plugin timed out")

// Run runs the command and returns its stdout. It returns when the plugin has exited and
// its output is closed, the timeout expired or ctx was cancelled; in the last two cases the
// plugin's process group has been killed first.
func (r *Runner) Run(ctx context.Context, c Command) (*Result, error) {
	call := Call{Command: c.Path, ExitCode: -1}
	res, err := r.run(ctx, c, &call)
	call.Status = statusOf(err)
	if r.Observe != nil {
		r.Observe(call)
	}
	return res, err
}

func (r *Runner) run(ctx context.Context, c Command, call *Call) (*Result, error) {
	path, err := resolve(c.Path, c.BaseDir, c.InstallHint, nil)
	if err != nil {
		return nil, err
	}
	call.Path = path
	env, err := MergeEnv(r.environ(), c.Env, c.Reserved)
	if err != nil {
		return nil, fmt.Errorf("plugin %q: %w", c.Path, err)
	}

	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeoutCause(runCtx, c.Timeout, errTimedOut)
		defer cancel()
	}

	limit := c.MaxOutput
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	stdout := &cappedBuffer{limit: limit, overflow: func() { stop(errOutputTooLarge) }}
	stderr := &tailWriter{w: r.stderr(), size: DefaultStderrTail}
	ownGroup := !c.Stdin.IsTerminal()

	var cmd *exec.Cmd
	if c.AnswerAtEOF {
		// Not tied to runCtx: os/exec would kill the plugin when the context ends after Run
		// returns. waitForAnswer watches runCtx itself until the answer is in.
		cmd = exec.Command(path, c.Args...) //nolint:noctx // see above
	} else {
		cmd = exec.CommandContext(runCtx, path, c.Args...)
	}
	cmd.Env = env
	cmd.Stdin = c.Stdin.reader()
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	if ownGroup {
		setGroup(cmd)
	}
	if !c.AnswerAtEOF {
		cmd.Cancel = func() error { return terminate(cmd.Process, ownGroup) }
	}
	cmd.WaitDelay = r.grace()

	var stdoutPipe io.Reader
	if c.AnswerAtEOF {
		cmd.Stdout = nil
		if stdoutPipe, err = cmd.StdoutPipe(); err != nil {
			return nil, fmt.Errorf("plugin %q: %w", c.Path, err)
		}
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, startError(ctx, c.Path, path, env, err)
	}
	call.Started = true
	if c.AnswerAtEOF {
		var stillRunning bool
		if err, stillRunning = r.waitForAnswer(runCtx, cmd, ownGroup, stdoutPipe, stdout); stillRunning {
			call.Duration = time.Since(start)
			return &Result{Stdout: stdout.buf.Bytes(), Stderr: stderr.String(), Path: path, Duration: call.Duration}, nil
		}
	} else {
		err = cmd.Wait()
	}
	call.Duration = time.Since(start)
	if cmd.ProcessState != nil && cmd.ProcessState.Exited() {
		call.ExitCode = cmd.ProcessState.ExitCode()
	}
	if err == nil {
		return &Result{Stdout: stdout.buf.Bytes(), Stderr: stderr.String(), Path: path, Duration: call.Duration}, nil
	}

	// Whatever went wrong, nothing the plugin started may outlive the failed run.
	_ = kill(cmd.Process, ownGroup)
	var exitErr *exec.ExitError
	switch {
	case stdout.exceeded():
		return nil, &OutputTooLargeError{Command: c.Path, Path: path, Limit: limit}
	case ctx.Err() != nil:
		return nil, &CanceledError{Command: c.Path, Err: ctx.Err()}
	case errors.Is(context.Cause(runCtx), errTimedOut):
		return nil, &TimeoutError{Command: c.Path, Path: path, Timeout: c.Timeout, Stderr: stderr.String(), StderrShown: r.StderrShown}
	case errors.Is(err, exec.ErrWaitDelay):
		return nil, &OutputHeldError{Command: c.Path, Path: path, Grace: r.grace()}
	case errors.As(err, &exitErr):
		return nil, &ExitError{
			Command:     c.Path,
			Path:        path,
			Code:        exitErr.ExitCode(),
			Signal:      exitSignal(exitErr.ProcessState),
			Stderr:      stderr.String(),
			StderrShown: r.StderrShown,
			Stdout:      stdout.buf.Bytes(),
			Duration:    call.Duration,
		}
	}
	return nil, fmt.Errorf("plugin %q: %w", c.Path, err)
}

func startError(ctx context.Context, command, path string, env []string, err error) error {
	if ctx.Err() != nil {
		return &CanceledError{Command: command, Err: ctx.Err()}
	}
	tooBig, reason := startErrorKind(err)
	if tooBig {
		name, size, total := largestEntry(env)
		return &EnvTooLargeError{Command: command, Path: path, Total: total, Largest: name, LargestSize: size, Err: err}
	}
	return &NotExecutableError{Command: command, Path: path, Reason: reason, Err: err}
}

func statusOf(err error) Status {
	var (
		notFound  *NotFoundError
		notExec   *NotExecutableError
		tooBig    *EnvTooLargeError
		exitErr   *ExitError
		timeout   *TimeoutError
		canceled  *CanceledError
		tooLarge  *OutputTooLargeError
		heldErr   *OutputHeldError
		statusFor = []struct {
			target any
			status Status
		}{
			{&notFound, StatusNotFound}, {&notExec, StatusNotExecutable}, {&tooBig, StatusEnvTooLarge},
			{&exitErr, StatusExitError}, {&timeout, StatusTimeout}, {&canceled, StatusCanceled},
			{&tooLarge, StatusOutputTooLarge}, {&heldErr, StatusOutputHeld},
		}
	)
	if err == nil {
		return StatusOK
	}
	for _, s := range statusFor {
		if errors.As(err, s.target) {
			return s.status
		}
	}
	return StatusInternal
}

func (r *Runner) environ() []string {
	if r.Environ != nil {
		return r.Environ()
	}
	return os.Environ() //nolint:forbidigo // the documented default of a nil Runner.Environ: a plugin inherits the host environment, as in client-go
}

func (r *Runner) stderr() io.Writer {
	if r.Stderr != nil {
		return r.Stderr
	}
	return os.Stderr
}

func (r *Runner) grace() time.Duration {
	if r.KillGrace > 0 {
		return r.KillGrace
	}
	return DefaultKillGrace
}

// waitForAnswer copies the plugin's stdout until it is closed, then gives the plugin
// KillGrace to exit. It returns the error of Wait if the plugin exited or was killed
// because ctx ended first, or stillRunning if it keeps running after answering; a
// goroutine then waits for it in the background.
func (r *Runner) waitForAnswer(ctx context.Context, cmd *exec.Cmd, ownGroup bool, pipe io.Reader, out *cappedBuffer) (err error, stillRunning bool) {
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(out, pipe) // ends at EOF, or when the cap is exceeded
		close(copied)
	}()
	exited := make(chan error, 1)
	select {
	case <-copied:
	case <-ctx.Done():
	}
	if ctx.Err() != nil || out.exceeded() { // timeout, cancellation or the cap: kill the plugin
		_ = terminate(cmd.Process, ownGroup)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			return orCause(err, ctx), false
		case <-time.After(r.grace()):
			_ = kill(cmd.Process, ownGroup)
			return orCause(<-exited, ctx), false
		}
	}
	go func() { exited <- cmd.Wait() }()
	timer := time.NewTimer(r.grace())
	defer timer.Stop()
	select {
	case err := <-exited:
		return err, false
	case <-timer.C:
		return nil, true
	}
}

// orCause makes sure a run that was stopped reports an error even if the plugin exited
// cleanly on SIGTERM.
func orCause(err error, ctx context.Context) error { //nolint:revive // context second: it only explains err
	if err == nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errOutputTooLarge
	}
	return err
}
