package proxyplugin

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
)

// DaemonProgram is the small build of proxy-plugin (cmd/kplug-proxy-plugin), installed
// beside kplug by make install and in every release archive. kplug starts it as the
// daemon that serves: it links about a third of kplug's packages, so it is about half
// kplug's resident memory under load (docs/reliability.md).
const DaemonProgram = "kplug-proxy-plugin"

// SmallDaemon is the program and arguments of the daemon kplug starts: DaemonProgram
// beside kplug's executable once it is the same build, else nothing (ok false), and kplug
// starts itself. What runs is the file checked: the directory is closed to other users'
// writes, so no one else can replace it between the check and the start.
func SmallDaemon(log *slog.Logger) (path string, args []string, ok bool) {
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		log.Warn("proxy-plugin: the daemon is kplug itself", "reason", fmt.Errorf("kplug's executable: %w", err))
		return "", nil, false
	}
	path, err = smallDaemonBeside(self)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errAnotherBuild):
		log.Debug("proxy-plugin: the daemon is kplug itself", "reason", err)
		return "", nil, false
	case err != nil:
		log.Warn("proxy-plugin: the daemon is kplug itself", "reason", err)
		return "", nil, false
	}
	return path, []string{"--daemon"}, true
}

// errAnotherBuild is a DaemonProgram left by an upgrade that replaced kplug only: the
// flags kplug hands over may be new to it.
var errAnotherBuild = errors.New("another build than kplug")

// smallDaemonBeside is DaemonProgram in the directory of self, kplug's executable, once
// checked; an error says why kplug serves itself.
func smallDaemonBeside(self string) (string, error) {
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
	ours, err := buildinfo.ReadFile(self)
	if err != nil {
		return "", fmt.Errorf("kplug's executable: %w", err)
	}
	if !sameBuild(ours, theirs) {
		return "", fmt.Errorf("%s: %w (%s)", path, errAnotherBuild, theirs.Main.Version)
	}
	return path, nil
}

// sameBuild reports whether two programs were built from the same module version, by
// the same toolchain, with the same settings (flags, version stamp, VCS revision).
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
