package proxyplugin

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/kplug/kplug/internal/version"
)

// DaemonProgram is the small build of proxy-plugin (cmd/kplug-proxy-plugin), installed
// beside kplug by make install and in every release archive. kplug starts it as the
// daemon that serves: it links about half kplug's packages and none of its heavy ones, so
// it is about half kplug's resident memory under load (docs/reliability.md).
const DaemonProgram = "kplug-proxy-plugin"

// probeTimeout bounds DaemonProgram's answer to --version.
const probeTimeout = 5 * time.Second

// SmallDaemon is the program and arguments of the daemon kplug starts: DaemonProgram
// beside kplug's executable once checked (smallDaemonBeside), else nothing (ok false),
// and kplug starts itself. Why is logged at debug level: kplug's own daemon is always
// a safe choice, only a larger one.
func SmallDaemon(ctx context.Context, log *slog.Logger) (path string, args []string, ok bool) {
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	ours, _ := debug.ReadBuildInfo()
	if err == nil {
		path, err = smallDaemonBeside(ctx, self, ours, version.Get().Kplug)
	}
	if err != nil {
		log.Debug("proxy-plugin: the daemon is kplug itself", "reason", err)
		return "", nil, false
	}
	return path, []string{"--daemon"}, true
}

// errAnotherBuild is a DaemonProgram that is not this kplug's: left by an upgrade that
// replaced kplug only, whose daemon may lack a fix and not know the flags kplug hands
// over; or another program under that name.
var errAnotherBuild = errors.New("not the kplug-proxy-plugin of this kplug")

// smallDaemonBeside is DaemonProgram in the directory of self, kplug's executable, once
// checked; an error says why kplug serves itself. It must be:
//   - installed like kplug (installedLike): a regular file of kplug's owner, not writable
//     by others, under no directory another user could change, so that the file checked
//     is the file started;
//   - built by the same toolchain with the same settings as kplug (ours), from the same
//     module;
//   - of kplug's version: it says so itself (--version). -trimpath keeps the version
//     stamp out of the build information, and it is what tells two releases apart.
func smallDaemonBeside(ctx context.Context, self string, ours *debug.BuildInfo, kplugVersion string) (string, error) {
	name := DaemonProgram
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	path := filepath.Join(filepath.Dir(self), name)
	fi, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if err := installedLike(path, fi, self); err != nil {
		return "", err
	}
	theirs, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w: %w", path, errAnotherBuild, err)
	}
	if ours == nil || !sameBuild(ours, theirs) {
		return "", fmt.Errorf("%s: %w (another toolchain, module or build settings)", path, errAnotherBuild)
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output() //nolint:gosec // checked above
	if err != nil {
		return "", fmt.Errorf("%s: %w: --version: %w", path, errAnotherBuild, err)
	}
	if want := DaemonProgram + " " + kplugVersion + "\n"; !bytes.Equal(out, []byte(want)) {
		return "", fmt.Errorf("%s: %w: --version said %.80q, want %q", path, errAnotherBuild, out, want)
	}
	return path, nil
}

// sameBuild reports whether two programs were built from the same module, by the same
// toolchain, with the same settings.
func sameBuild(a, b *debug.BuildInfo) bool {
	settings := func(bi *debug.BuildInfo) map[string]string {
		m := make(map[string]string, len(bi.Settings))
		for _, s := range bi.Settings {
			m[s.Key] = s.Value
		}
		return m
	}
	return a.GoVersion == b.GoVersion && a.Main == b.Main && maps.Equal(settings(a), settings(b))
}
