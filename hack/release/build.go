package main

import (
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// defaultPlatforms are the platforms make release builds: every one `make lint` vets.
var defaultPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64", "windows/arm64"}

type platform struct{ os, arch string }

func (p platform) String() string { return p.os + "/" + p.arch }

// exe is the file name of program on p.
func (p platform) exe(program string) string {
	if p.os == "windows" {
		return program + ".exe"
	}
	return program
}

func parsePlatforms(s string) ([]platform, error) {
	var ps []platform
	for _, item := range strings.Split(s, ",") {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(item), "/")
		if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
			return nil, fmt.Errorf("invalid platform %q: want GOOS/GOARCH, e.g. linux/amd64", item)
		}
		p := platform{goos, goarch}
		if slices.Contains(ps, p) {
			return nil, fmt.Errorf("platform %s given twice", p)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

type options struct {
	out, version, syft, source string
	platforms                  []platform
	archivesOnly               bool     // stop after the archives and SHA256SUMS
	environ                    []string // the builder's environment, os.Environ(): read, never passed on whole
}

// programs are the binaries every archive holds: kplug; exec-cache as a program of its
// own for kubeconfigs where a warm hit's cost matters; and proxy-plugin as a program of
// its own, which kplug starts as the exec proxy's daemon (half kplug's memory).
var programs = []string{"kplug", "kplug-exec-cache", "kplug-proxy-plugin"}

// docs are copied from the checkout into every archive and the image.
var docs = []string{"LICENSE", "README.md"}

// commit is what the release says about the commit it was built from.
type commit struct {
	revision string    // full hash
	time     time.Time // commit time, or SOURCE_DATE_EPOCH: every timestamp in the output
}

func build(ctx context.Context, o options) error {
	src, err := filepath.Abs(o.source)
	if err != nil {
		return err
	}
	c, err := readCommit(ctx, src, o.environ)
	if err != nil {
		return err
	}
	tc, ignored, err := newToolchain(ctx, src, o.environ)
	if err != nil {
		return err
	}
	if len(ignored) > 0 {
		fmt.Fprintf(os.Stderr, "release: ignoring %s from the environment: a release is built with its own settings (docs/development.md, Releases)\n", strings.Join(ignored, ", "))
	}
	out, err := filepath.Abs(o.out)
	if err != nil {
		return err
	}
	if err := checkReplaceable(out); err != nil {
		return err
	}
	// Everything is built beside the output and renamed into place at the end, so that a
	// failed run leaves the previous release as it was.
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dist := filepath.Join(tmp, "dist")
	if err := os.Mkdir(dist, 0o755); err != nil {
		return err
	}

	var built []archive
	for _, p := range o.platforms {
		a, err := buildPlatform(ctx, o, tc, c, src, tmp, dist, p)
		if err != nil {
			return err
		}
		built = append(built, a)
	}
	if err := writeRest(ctx, o, src, dist, c, built); err != nil {
		return err
	}
	if err := writeChecksums(dist); err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.Rename(dist, out); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "release: %s for %d platforms in %s\n", o.version, len(built), out)
	return nil
}

// writeRest writes what a release holds besides the archives: the krew manifest, the
// image and the module proxy, unless only the archives are asked for.
func writeRest(ctx context.Context, o options, src, dist string, c commit, built []archive) error {
	if o.archivesOnly {
		return nil
	}
	if err := writeKrewManifest(filepath.Join(src, "deploy", "krew", "kplug.yaml"), filepath.Join(dist, krewManifest), o.version, built); err != nil {
		return err
	}
	if err := writeImage(ctx, filepath.Join(dist, "image"), src, o.version, c, built); err != nil {
		return err
	}
	return writeModuleProxy(filepath.Join(dist, goProxyDir), src, o.version, c)
}

// archive is one platform's build: its staged files, archive and SBOM.
type archive struct {
	platform platform
	stage    string // directory holding the archive's files
	name     string // file name of the archive in the release
	sha256   string
	sbom     []byte // the normalized CycloneDX JSON
}

func buildPlatform(ctx context.Context, o options, tc toolchain, c commit, src, tmp, dist string, p platform) (archive, error) {
	a := archive{platform: p, stage: filepath.Join(tmp, "stage", p.os+"_"+p.arch)}
	if err := os.MkdirAll(a.stage, 0o755); err != nil {
		return a, err
	}
	var built []builtProgram
	for _, prog := range programs {
		b, err := goBuild(ctx, tc, src, p, o.version, prog, a.stage)
		if err != nil {
			return a, err
		}
		built = append(built, b)
	}
	for _, d := range docs {
		data, err := os.ReadFile(filepath.Join(src, d))
		if err != nil {
			return a, err
		}
		if err := os.WriteFile(filepath.Join(a.stage, d), data, 0o644); err != nil {
			return a, err
		}
	}
	a.name = archiveName(o.version, p)
	data, err := packArchive(a.stage, p, c.time)
	if err != nil {
		return a, fmt.Errorf("archive for %s: %w", p, err)
	}
	if err := os.WriteFile(filepath.Join(dist, a.name), data, 0o644); err != nil {
		return a, err
	}
	sum := sha256.Sum256(data)
	a.sha256 = hex.EncodeToString(sum[:])
	if o.archivesOnly {
		fmt.Fprintf(os.Stderr, "release: %s\n", a.name)
		return a, nil
	}
	if a.sbom, err = makeSBOM(ctx, o.syft, a.stage, o.version, c.time, o.environ, formulation(tc, p, built)); err != nil {
		return a, fmt.Errorf("SBOM for %s: %w", p, err)
	}
	if err := os.WriteFile(filepath.Join(dist, a.name+sbomSuffix), a.sbom, 0o644); err != nil {
		return a, err
	}
	fmt.Fprintf(os.Stderr, "release: %s\n", a.name)
	return a, nil
}

// archiveName is the archive of version for p, as krew manifests and package managers name
// them: kplug_1.2.3_linux_amd64.tar.gz (the version without its "v"), .zip on Windows.
func archiveName(version string, p platform) string {
	ext := ".tar.gz"
	if p.os == "windows" {
		ext = ".zip"
	}
	return fmt.Sprintf("kplug_%s_%s_%s%s", strings.TrimPrefix(version, "v"), p.os, p.arch, ext)
}

// builtProgram is a program built for a platform, as its build information says.
type builtProgram struct {
	name     string   // kplug, kplug-exec-cache, kplug-proxy-plugin
	executed []string // the go command's arguments, with the output's file name
	info     *buildinfo.BuildInfo
}

// goBuild builds ./cmd/<prog> for p into dir, cgo-free, with nothing of the machine or the
// checkout's path in it: -trimpath, no VCS stamp (the version is stamped), no symbol table
// or DWARF, in tc's environment (the pinned toolchain and settings, nothing of the
// builder's), and checks the result's build information.
func goBuild(ctx context.Context, tc toolchain, src string, p platform, version, prog, dir string) (builtProgram, error) {
	args := func(out string) []string {
		ldflags := "-s -w -X github.com/kplug/kplug/internal/version.Version=" + version
		return []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, "./cmd/" + prog}
	}
	out := filepath.Join(dir, p.exe(prog))
	cmd := exec.CommandContext(ctx, "go", args(out)...)
	cmd.Dir = src
	cmd.Env = tc.platformEnv(p)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return builtProgram{}, fmt.Errorf("go build ./cmd/%s for %s: %w", prog, p, err)
	}
	info, err := checkBinary(out, p, tc.goVersion)
	if err != nil {
		return builtProgram{}, err
	}
	return builtProgram{name: prog, executed: args(p.exe(prog)), info: info}, nil
}

// readCommit reads HEAD's hash and time from git in src. SOURCE_DATE_EPOCH, when set,
// replaces the time (https://reproducible-builds.org/specs/source-date-epoch/).
// git runs with PATH and HOME only (HOME for safe.directory): a GIT_DIR, GIT_WORK_TREE or
// GIT_CONFIG_* of the builder's would make it read another commit.
func readCommit(ctx context.Context, src string, environ []string) (commit, error) {
	builder := envMap(environ)
	cmd := exec.CommandContext(ctx, "git", "-C", src, "log", "-1", "--format=%H %ct")
	cmd.Env = []string{} // not nil, which would inherit
	for _, k := range []string{"PATH", "HOME", "SYSTEMROOT"} {
		if v, ok := builder[envKey(k)]; ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		return commit{}, fmt.Errorf("reading the commit from git in %s (a release is built from a git checkout): %w", src, err)
	}
	hash, secs, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if epoch := builder["SOURCE_DATE_EPOCH"]; epoch != "" {
		secs = epoch
	}
	n, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return commit{}, fmt.Errorf("invalid commit time %q: %w", secs, err)
	}
	return commit{revision: hash, time: time.Unix(n, 0).UTC()}, nil
}

// checkReplaceable refuses to replace a directory that is not an earlier release.
func checkReplaceable(out string) error {
	entries, err := os.ReadDir(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(out, checksumsFile)); err != nil {
		return fmt.Errorf("%s exists and is not a release (no %s): remove it or choose another --out", out, checksumsFile)
	}
	return nil
}
