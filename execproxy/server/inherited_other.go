//go:build !unix

package server

import (
	"log/slog"
	"os"
)

// closeInherited does nothing here: the proxy does not serve on this platform.
func closeInherited(*os.File, *slog.Logger) {}
