// Package swtpm runs software TPM 2.0s for tests: each a swtpm process with its own state
// directory and unix sockets, driven by the kplug code under test and by tpm2-tools, so
// that tests exercise keys that never leave a TPM without one in the machine. It needs the
// swtpm and tpm2-tools packages.
package swtpm

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Installed returns nil if swtpm and tpm2-tools are installed, or an error saying what to
// install.
func Installed() error {
	var missing []string
	for cmd, pkg := range map[string]string{"swtpm": "swtpm", "tpm2_createprimary": "tpm2-tools"} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("software TPM not installed (apt-get install swtpm swtpm-tools tpm2-tools; missing %s)", strings.Join(missing, ", "))
	}
	return nil
}

// TPM is a running swtpm. Its methods are not safe for concurrent use.
type TPM struct {
	// Socket is the server socket that carries TPM commands: the device= of a tpm: URI.
	Socket string
	Dir    string // the state directory, where Tool runs
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // of cmd.Wait, once exited is closed
}

// Start starts a fresh TPM 2.0 (manufactured on first start, then TPM2_Startup(CLEAR))
// with its state, sockets and log in dir. The tpm2-tools swtpm TCTI finds the control
// socket as Socket+".ctrl", so it is named that way. Unix socket paths are limited to about
// 100 bytes: keep dir short.
func Start(dir string) (*TPM, error) {
	if err := Installed(); err != nil {
		return nil, err
	}
	t := &TPM{Socket: filepath.Join(dir, "tpm"), Dir: dir, exited: make(chan struct{})}
	logf, err := os.Create(filepath.Join(dir, "swtpm.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	t.cmd = exec.Command("swtpm", "socket", "--tpm2", //nolint:noctx // stopped by Stop
		"--server", "type=unixio,path="+t.Socket,
		"--ctrl", "type=unixio,path="+t.Socket+".ctrl",
		"--tpmstate", "dir="+dir,
		"--flags", "not-need-init,startup-clear")
	t.cmd.Stdout, t.cmd.Stderr = logf, logf
	if err := t.cmd.Start(); err != nil {
		return nil, fmt.Errorf("swtpm: %w", err)
	}
	go func() { t.err = t.cmd.Wait(); close(t.exited) }()
	deadline := time.After(10 * time.Second)
	for {
		// Ready once it accepts: the socket file appears at bind, before swtpm listens,
		// and a client that connects in between is refused (seen in CI).
		if c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "unix", t.Socket); err == nil {
			_ = c.Close()
			return t, nil
		}
		select {
		case <-t.exited:
			return nil, fmt.Errorf("swtpm exited at start: %w: %s", t.err, t.log())
		case <-deadline:
			_ = t.Stop()
			return nil, fmt.Errorf("swtpm: no socket %s after 10s: %s", t.Socket, t.log())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (t *TPM) log() string {
	b, _ := os.ReadFile(filepath.Join(t.Dir, "swtpm.log"))
	return strings.TrimSpace(string(b))
}

// Stop terminates swtpm and waits for it to exit. It may be called more than once.
func (t *TPM) Stop() error {
	select {
	case <-t.exited:
		return nil
	default:
	}
	_ = t.cmd.Process.Signal(os.Interrupt)
	select {
	case <-t.exited:
	case <-time.After(5 * time.Second):
		_ = t.cmd.Process.Kill()
		<-t.exited
	}
	return nil
}

// TCTI is the tpm2-tools TCTI configuration for the TPM ($TPM2TOOLS_TCTI).
func (t *TPM) TCTI() string { return "swtpm:path=" + t.Socket }

// Tool runs the tpm2-tools command tpm2_<name> on the TPM in its directory and returns its
// standard output. A swtpm has no resource manager, so every transient object and session
// the tool leaves loaded is flushed after it, or the TPM soon runs out of object slots.
func (t *TPM) Tool(name string, args ...string) ([]byte, error) {
	out, err := t.run(name, args...)
	for _, kind := range []string{"-t", "-l", "-s"} {
		if _, ferr := t.run("flushcontext", kind); ferr != nil && err == nil {
			err = ferr
		}
	}
	return out, err
}

func (t *TPM) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command("tpm2_"+name, args...) //nolint:noctx // short-lived test tool
	cmd.Dir = t.Dir
	cmd.Env = append(os.Environ(), "TPM2TOOLS_TCTI="+t.TCTI())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("tpm2_%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
