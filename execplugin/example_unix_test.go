//go:build unix

package execplugin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kplug/kplug/execplugin"
)

// A run captures stdout, passes stderr through (here discarded), and turns every failure
// into a typed error to branch on.
func Example() {
	r := &execplugin.Runner{Stderr: io.Discard}
	res, err := r.Run(context.Background(), execplugin.Command{
		Path:    "sh",
		Args:    []string{"-c", `echo '{"token":"t"}'; echo working >&2`},
		Timeout: 10 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("stdout %s", res.Stdout)

	_, err = r.Run(context.Background(), execplugin.Command{Path: "sh", Args: []string{"-c", "echo no credentials >&2; exit 3"}})
	var exit *execplugin.ExitError
	if errors.As(err, &exit) {
		fmt.Printf("exit code %d, stderr %q\n", exit.Code, exit.Stderr)
	}

	_, err = r.Run(context.Background(), execplugin.Command{Path: "kplug-no-such-plugin", InstallHint: "install it from example.com"})
	var notFound *execplugin.NotFoundError
	fmt.Println(errors.As(err, &notFound), notFound.InstallHint)
	// Output:
	// stdout {"token":"t"}
	// exit code 3, stderr "no credentials\n"
	// true install it from example.com
}
