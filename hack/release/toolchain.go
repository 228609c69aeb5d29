package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// toolchain is the Go toolchain that builds a release and the environment the go command
// runs in. The environment is made here, not inherited: a builder's GOFIPS140=latest,
// GOFLAGS=-tags=..., GOEXPERIMENT, GOAMD64, go.work or `go env -w` file would otherwise
// change the bytes of binaries that claim to be a function of the commit.
type toolchain struct {
	goVersion string   // go.mod's toolchain line, e.g. go1.26.8: the only go a release is built with
	env       []string // the go command's whole environment, but the target's GOOS and GOARCH
}

// pinnedSettings are the variables that decide what the go command generates, each set
// for every build whatever the builder's environment says. An empty GOEXPERIMENT is the
// toolchain's baseline; the build information of every binary is checked afterwards
// (checkBinary), so a toolchain built with other defaults is refused, not shipped.
var pinnedSettings = []string{
	"GOENV=off",  // no `go env -w` file of the builder's
	"GOWORK=off", // no go.work around the checkout: its replace and godebug lines change the build
	"GOFLAGS=-mod=readonly",
	"CGO_ENABLED=0",
	"GOAMD64=v1",
	"GOARM64=v8.0",
	"GOFIPS140=off",
	"GOEXPERIMENT=",
	// Used only to fetch the pinned toolchain when it is not the go on PATH: modules
	// are checked against go.sum, a toolchain against the checksum database.
	"GOSUMDB=sum.golang.org",
}

// passedThrough are the builder's variables that the go command needs to run and to
// fetch, none of which changes what it generates: PATH finds go (whose version is then
// checked), HOME holds .netrc for an authenticated proxy, the rest are the network's
// and, on Windows, the system's.
var passedThrough = []string{
	"PATH", "HOME", "TMPDIR", "NETRC",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR",
	"SYSTEMROOT", "USERPROFILE", "LOCALAPPDATA", "APPDATA", "TEMP", "TMP",
}

// resolved are the go command's settings that the builder keeps (its caches and module
// proxy), read with `go env` in the builder's environment so that `go env -w` values
// count, and passed on as explicit values. None changes the bytes: the build cache is
// keyed by every input, and modules are checked against go.sum.
var resolved = []string{"GOCACHE", "GOMODCACHE", "GOPROXY"}

// newToolchain reads the toolchain go.mod pins in src and makes the go command's
// environment from environ (the builder's, os.Environ()). It checks that the go it will
// run is the pinned one: the go on PATH when it is that version, else the pinned version
// that the go command selects with GOTOOLCHAIN (a go1.26.8 program on PATH, or a fetch
// from the module proxy). ignored names the builder's Go variables that the release
// overrides, for the caller to report.
func newToolchain(ctx context.Context, src string, environ []string) (tc toolchain, ignored []string, err error) {
	if tc.goVersion, err = readToolchainLine(filepath.Join(src, "go.mod")); err != nil {
		return tc, nil, err
	}
	builder := envMap(environ)
	var env []string
	for _, k := range passedThrough {
		if v, ok := builder[envKey(k)]; ok {
			env = append(env, k+"="+v)
		}
	}
	local, settings, err := builderSettings(ctx, env, builder)
	if err != nil {
		return tc, nil, err
	}
	for _, k := range resolved {
		env = append(env, k+"="+settings[k])
	}
	env = append(env, pinnedSettings...)
	tc.env = append(env, "GOTOOLCHAIN="+tc.goVersion)

	if local != tc.goVersion {
		fmt.Fprintf(os.Stderr, "release: the go on PATH is %s and go.mod pins %s: building with %s, which GOTOOLCHAIN=%s selects (fetching it from the module proxy unless it is on PATH or cached)\n",
			local, tc.goVersion, tc.goVersion, tc.goVersion)
	}
	selected, err := goEnv(ctx, src, tc.env, "GOVERSION")
	if err != nil {
		return tc, nil, fmt.Errorf("go.mod's toolchain line pins %s, the go on PATH is %s, and the go command could not run %s: %w; "+
			"install %s (https://go.dev/dl/) first on PATH", tc.goVersion, local, tc.goVersion, err, tc.goVersion)
	}
	if got := selected["GOVERSION"]; got != tc.goVersion {
		return tc, nil, fmt.Errorf("go.mod's toolchain line pins %s, but with GOTOOLCHAIN=%s the go on PATH runs %s; install %s (https://go.dev/dl/) first on PATH",
			tc.goVersion, tc.goVersion, got, tc.goVersion)
	}

	set := envMap(tc.env)
	for k, v := range builder {
		kept := slices.Contains(resolved, k) || k == "GOPATH"
		if (strings.HasPrefix(k, "GO") || strings.HasPrefix(k, "CGO_")) && !kept && set[k] != v {
			ignored = append(ignored, k)
		}
	}
	slices.Sort(ignored)
	return tc, ignored, nil
}

// readToolchainLine returns the toolchain go.mod pins (its toolchain line).
func readToolchainLine(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	f, err := modfile.Parse(gomod, data, nil)
	if err != nil {
		return "", err
	}
	if f.Toolchain == nil {
		return "", fmt.Errorf("%s has no toolchain line: a release is built with the toolchain go.mod pins (add one, e.g. toolchain go1.26.8)", gomod)
	}
	return f.Toolchain.Name, nil
}

// builderSettings reads the go on PATH's version and the resolved settings as the
// builder's go command sees them: base (what is passed through) with the builder's
// variables that locate the caches, the proxy and its `go env -w` file. It runs outside
// any module, with GOTOOLCHAIN=local, so that it neither selects nor fetches a toolchain.
func builderSettings(ctx context.Context, base []string, builder map[string]string) (local string, settings map[string]string, err error) {
	env := slices.Clone(base)
	for _, k := range append([]string{"GOENV", "GOPATH", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"}, resolved...) {
		if v, ok := builder[envKey(k)]; ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, "GOTOOLCHAIN=local")
	settings, err = goEnv(ctx, os.TempDir(), env, append([]string{"GOVERSION"}, resolved...)...)
	if err != nil {
		return "", nil, fmt.Errorf("reading the go command's caches and proxy: %w", err)
	}
	for _, k := range resolved {
		if settings[k] == "" {
			return "", nil, fmt.Errorf("the go command has no %s", k)
		}
	}
	return settings["GOVERSION"], settings, nil
}

// goEnv runs `go env -json names...` in dir with env.
func goEnv(ctx context.Context, dir string, env []string, names ...string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"env", "-json"}, names...)...)
	cmd.Dir, cmd.Env = dir, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	values := map[string]string{}
	if err := json.Unmarshal(out, &values); err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	return values, nil
}

// platformEnv is the go command's environment to build for p.
func (tc toolchain) platformEnv(p platform) []string {
	return append(slices.Clone(tc.env), "GOOS="+p.os, "GOARCH="+p.arch)
}

// wantSettings are the build settings that every release binary for p records: those the
// pinned environment and goBuild's flags give. A binary recording anything else (a
// -tags, GOFIPS140, GOEXPERIMENT, another GOAMD64...) was not built as a release is.
func wantSettings(p platform) map[string]string {
	want := map[string]string{
		"-buildmode": "exe", "-compiler": "gc", "-trimpath": "true",
		"CGO_ENABLED": "0", "GOOS": p.os, "GOARCH": p.arch,
	}
	switch p.arch {
	case "amd64":
		want["GOAMD64"] = "v1"
	case "arm64":
		want["GOARM64"] = "v8.0"
	}
	return want
}

// checkBinary reads the build information of the program at path, built for p, and
// refuses it unless the pinned toolchain built it with exactly the release's settings:
// a check on the binary itself, not on the environment it was meant to be built in.
// DefaultGODEBUG is the one setting left free: it follows go.mod's go and godebug lines,
// which are the commit's.
func checkBinary(path string, p platform, goVersion string) (*buildinfo.BuildInfo, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the build information of %s: %w", path, err)
	}
	if err := checkBuildInfo(bi, filepath.Base(path)+" for "+p.String(), p, goVersion); err != nil {
		return nil, err
	}
	return bi, nil
}

func checkBuildInfo(bi *buildinfo.BuildInfo, name string, p platform, goVersion string) error {
	if bi.GoVersion != goVersion {
		return fmt.Errorf("%s was built by %s, not by %s (go.mod's toolchain line)", name, bi.GoVersion, goVersion)
	}
	want := wantSettings(p)
	got := map[string]string{}
	for _, s := range bi.Settings {
		got[s.Key] = s.Value
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if w, ok := want[k]; (ok && got[k] != w) || (!ok && k != "DefaultGODEBUG") {
			errs = append(errs, fmt.Errorf("%s=%s (want %q)", k, got[k], w))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[k]; !ok {
			errs = append(errs, fmt.Errorf("no %s (want %s)", k, want[k]))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s was not built with the release's settings: %s", name, strings.ReplaceAll(err.Error(), "\n", ", "))
	}
	return nil
}

// envMap maps environ's variables to their last values, as os/exec resolves duplicates.
// Names are upper-cased on Windows, where they are case-insensitive.
func envMap(environ []string) map[string]string {
	m := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[envKey(k)] = v
		}
	}
	return m
}

func envKey(k string) string {
	if runtime.GOOS == "windows" {
		return strings.ToUpper(k)
	}
	return k
}
