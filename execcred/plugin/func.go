package plugin

import (
	"context"
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
// calls f and writes its answer to stdout in the version the client asked for.
func Run(ctx context.Context, f Func, info string, stdout io.Writer) error {
	in, err := LoadInfo(info)
	if err != nil {
		return err
	}
	status, err := f(ctx, in)
	if err != nil {
		return err
	}
	return Write(stdout, in, status)
}

// Main runs f as the whole program: KUBERNETES_EXEC_INFO in, the answer on stdout, and on
// error a message on stderr (which clients show the user) and exit code 1. f's context
// ends on SIGINT or SIGTERM, which a client's timeout sends.
func Main(f Func) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, f, os.Getenv(wire.InfoEnv), os.Stdout) //nolint:forbidigo // Main is a plugin's main function: it reads the process's environment
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
