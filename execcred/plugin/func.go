package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kplug/kplug/execcred/wire"
)

// Func is a credential plugin written as a function: given what the client said, it
// returns the credential. Main and Run make it a program; execcred.FuncSource runs it
// in-process as an execcred.Source; Cache.Wrap adds a disk cache shared by its runs.
type Func func(ctx context.Context, info *Info) (*wire.Status, error)

// Run is one run of a plugin program: it reads info, the value of KUBERNETES_EXEC_INFO,
// calls f and writes its answer to stdout in the version the client asked for. When f
// fails with a *StatusError, Run writes its Failure to stdout instead and returns the
// error.
func Run(ctx context.Context, f Func, info string, stdout io.Writer) error {
	in, err := LoadInfo(info)
	if err != nil {
		return err
	}
	status, err := f(ctx, in)
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) {
			out, eerr := se.failure().Encode()
			if eerr == nil {
				_, eerr = stdout.Write(out)
			}
			return errors.Join(err, eerr)
		}
		return err
	}
	return Write(stdout, in, status)
}

// StatusError is a failure a Func explains to the user. Run prints it on stdout as a
// metav1.Status (wire.Failure); Main also prints Message on stderr and exits 1. Which
// clients show it:
//
//   - kplug's runtime (execcred), always: `execcred: plugin "my-plugin" exited with code 1:
//     <Message>`;
//   - client-go from the release that takes kubernetes/kubernetes#141915, behind its
//     ExecPluginStatusError feature gate, proposed as beta (client-go's beta gates are
//     usually on by default; KUBE_FEATURE_ExecPluginStatusError=true|false sets it). No
//     release has it yet: not v0.36.3, which kplug's go.mod pins, nor v0.37.0-beta.0;
//   - older clients ignore stdout when a plugin fails, report the exit code, and pass the
//     plugin's stderr through, where Main has printed the message.
//
// Write Message for a person, and put no secret in it: clients show it, and may log it.
// A StatusError is a value; it is safe to share once made.
type StatusError struct {
	Message string // what the user reads; empty means Err's message
	Reason  string // optional, CamelCase for programs: Unauthorized, Forbidden, ...
	Code    int32  // optional, an HTTP status code: 401, 403, ...
	Err     error  // optional, the cause; Unwrap gives it
}

func (e *StatusError) Error() string {
	if e.Message == "" && e.Err != nil {
		return e.Err.Error()
	}
	return e.Message
}

func (e *StatusError) Unwrap() error { return e.Err }

func (e *StatusError) failure() *wire.Failure {
	return &wire.Failure{Message: e.Error(), Reason: e.Reason, Code: e.Code}
}

// Main runs f as the whole program: KUBERNETES_EXEC_INFO in, the answer on stdout, and on
// error a message on stderr (which clients show the user) and exit code 1; a *StatusError
// is also printed on stdout (see Run). f's context ends on SIGINT or SIGTERM, which a
// client's timeout sends.
func Main(f Func) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, f, os.Getenv(wire.InfoEnv), os.Stdout) //nolint:forbidigo // Main is a plugin's main function: it reads the process's environment
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
