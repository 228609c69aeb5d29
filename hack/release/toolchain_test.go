package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// moduleRoot is the kplug checkout these tests run in.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// pinnedGo is the toolchain the checkout's go.mod pins.
func pinnedGo(t *testing.T) string {
	t.Helper()
	v, err := readToolchainLine(filepath.Join(moduleRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// minimalEnviron is a builder's environment with nothing of Go's in it.
func minimalEnviron() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
}

// pollutedEnviron is the test's environment with every Go setting that changes the bytes
// of a build set otherwise: FIPS 140-3 mode, a build tag, an experiment, a newer
// instruction set, cgo, a go.work whose godebug line turns FIPS mode on, a `go env -w`
// file, another toolchain and GOROOT.
func pollutedEnviron(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	gowork := filepath.Join(dir, "go.work")
	goenv := filepath.Join(dir, "goenv")
	for name, content := range map[string]string{
		gowork: "go 1.26.0\n\nuse " + moduleRoot(t) + "\n\ngodebug fips140=on\n",
		goenv:  "GOFIPS140=v1.0.0\nGOFLAGS=-tags=kplug_from_goenv\n",
	} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return append(os.Environ(),
		"GOFIPS140=latest", "GOFLAGS=-tags=kplug_polluted", "GOEXPERIMENT=nogreenteagc",
		"GOAMD64=v3", "GOARM64=v9.0", "CGO_ENABLED=1", "GOWORK="+gowork, "GOENV="+goenv,
		"GOTOOLCHAIN=go1.26.7", "GOROOT="+dir, "GODEBUG=fips140=on")
}

// N6: a release build inherited the builder's environment, so GOFIPS140=latest (or a
// go.work, a `go env -w` file...) silently gave other binaries from the same commit. A
// polluted environment must give the same bytes as a minimal one, or a clear refusal.
func TestSecurityReleaseBuildIgnoresTheBuildersEnvironment(t *testing.T) {
	t.Parallel()
	src := moduleRoot(t)
	p := platform{"linux", "amd64"}
	build := func(environ []string) []byte {
		t.Helper()
		tc, _, err := newToolchain(t.Context(), src, environ)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if _, err := goBuild(t.Context(), tc, src, p, "v1.2.3", "kplug-exec-cache", dir); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, "kplug-exec-cache"))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	clean, polluted := build(minimalEnviron()), build(pollutedEnviron(t))
	if !bytes.Equal(clean, polluted) {
		bi, _ := buildinfo.Read(bytes.NewReader(polluted))
		t.Errorf("the polluted environment gave other bytes than a minimal one; its build information:\n%v", bi)
	}
}

// The go command's environment is made, not inherited: the builder's PATH, HOME and
// caches, then the release's settings, whatever the builder set.
func TestToolchainEnvironment(t *testing.T) {
	t.Parallel()
	src := moduleRoot(t)
	polluted := pollutedEnviron(t)
	tc, ignored, err := newToolchain(t.Context(), src, polluted)
	if err != nil {
		t.Fatal(err)
	}
	// The builder's caches and proxy, wherever its environment puts them (a CI may point
	// GOCACHE, GOMODCACHE or XDG_CACHE_HOME elsewhere).
	locators := minimalEnviron()
	for _, k := range append([]string{"GOPATH", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"}, resolved...) {
		if v, ok := os.LookupEnv(k); ok {
			locators = append(locators, k+"="+v)
		}
	}
	settings, err := goEnv(t.Context(), t.TempDir(), locators, resolved...)
	if err != nil {
		t.Fatal(err)
	}
	builder := envMap(polluted)
	var want []string
	for _, k := range passedThrough {
		if v, ok := builder[k]; ok {
			want = append(want, k+"="+v)
		}
	}
	for _, k := range resolved {
		want = append(want, k+"="+settings[k])
	}
	want = append(want, "GOENV=off", "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0", "GOAMD64=v1", "GOARM64=v8.0",
		"GOFIPS140=off", "GOEXPERIMENT=", "GOSUMDB=sum.golang.org", "GOTOOLCHAIN="+pinnedGo(t))
	if diff := cmp.Diff(want, tc.env); diff != "" {
		t.Errorf("the go command's environment (-want +got):\n%s", diff)
	}
	if got := tc.platformEnv(platform{"windows", "arm64"}); !slices.Equal(got[len(got)-2:], []string{"GOOS=windows", "GOARCH=arm64"}) {
		t.Errorf("platformEnv ends %q", got[len(got)-2:])
	}
	for _, k := range []string{"CGO_ENABLED", "GOAMD64", "GOARM64", "GODEBUG", "GOENV", "GOEXPERIMENT", "GOFIPS140", "GOFLAGS", "GOROOT", "GOTOOLCHAIN", "GOWORK"} {
		if !slices.Contains(ignored, k) {
			t.Errorf("ignored %q, want %s in it", ignored, k)
		}
	}
}

func TestSecurityReleaseRefusesAnotherToolchain(t *testing.T) {
	t.Parallel()
	environ := append(minimalEnviron(), "GOPROXY=off") // nothing is fetched
	for _, tt := range []struct {
		gomod string
		want  []string // in the error, in order
	}{
		{"module example.com/m\n\ngo 1.26.0\n", []string{"/go.mod has no toolchain line: a release is built with the toolchain go.mod pins (add one, e.g. toolchain go1.26.8)"}},
		// Not the go on PATH, and not to be fetched: refused, saying what to install.
		{"module example.com/m\n\ngo 1.26.0\n\ntoolchain go1.26.7\n", []string{
			"go.mod's toolchain line pins go1.26.7, the go on PATH is go1.",
			", and the go command could not run go1.26.7: go env: exit status 1: go: downloading go1.26.7",
			"toolchain not available; install go1.26.7 (https://go.dev/dl/) first on PATH",
		}},
	} {
		src := t.TempDir()
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(tt.gomod), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := newToolchain(t.Context(), src, environ)
		rest := errString(err)
		for _, want := range tt.want {
			_, after, ok := strings.Cut(rest, want)
			if !ok {
				t.Errorf("go.mod %q: %v, want an error with, in order, %q", tt.gomod, err, tt.want)
				break
			}
			rest = after
		}
	}
}

// What was used is checked, not only what was asked for: a binary whose build information
// differs from the release's settings in any way is refused.
func TestSecurityReleaseChecksTheBuiltBinary(t *testing.T) {
	t.Parallel()
	good := func() *buildinfo.BuildInfo {
		return &buildinfo.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{
			{Key: "-buildmode", Value: "exe"}, {Key: "-compiler", Value: "gc"}, {Key: "-trimpath", Value: "true"},
			{Key: "DefaultGODEBUG", Value: "tlsmlkem=0"},
			{Key: "CGO_ENABLED", Value: "0"}, {Key: "GOARCH", Value: "amd64"}, {Key: "GOOS", Value: "linux"}, {Key: "GOAMD64", Value: "v1"},
		}}
	}
	set := func(k, v string) func(*buildinfo.BuildInfo) {
		return func(bi *buildinfo.BuildInfo) {
			for i, s := range bi.Settings {
				if s.Key == k {
					if v == "" {
						bi.Settings = slices.Delete(bi.Settings, i, i+1)
					} else {
						bi.Settings[i].Value = v
					}
					return
				}
			}
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: k, Value: v})
		}
	}
	const prefix = "kplug for linux/amd64 was not built with the release's settings: "
	for _, tt := range []struct {
		change func(*buildinfo.BuildInfo)
		want   string
	}{
		{func(*buildinfo.BuildInfo) {}, ""},
		{func(bi *buildinfo.BuildInfo) { bi.GoVersion = "go1.26.7" }, "kplug for linux/amd64 was built by go1.26.7, not by go1.26.8 (go.mod's toolchain line)"},
		{set("GOFIPS140", "latest"), prefix + `GOFIPS140=latest (want "")`},
		{set("-tags", "kplug_polluted"), prefix + `-tags=kplug_polluted (want "")`},
		{set("GOEXPERIMENT", "nogreenteagc"), prefix + `GOEXPERIMENT=nogreenteagc (want "")`},
		{set("CGO_ENABLED", "1"), prefix + `CGO_ENABLED=1 (want "0")`},
		{set("GOAMD64", "v3"), prefix + `GOAMD64=v3 (want "v1")`},
		{set("-trimpath", ""), prefix + "no -trimpath (want true)"},
	} {
		bi := good()
		tt.change(bi)
		err := checkBuildInfo(bi, "kplug for linux/amd64", platform{"linux", "amd64"}, "go1.26.8")
		if got := errString(err); got != tt.want {
			t.Errorf("checkBuildInfo:\n got %s\nwant %s", got, tt.want)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The SBOM says which toolchain built the programs, with which environment and settings,
// in CycloneDX's place for it: the formulation.
func TestSBOMRecordsTheToolchain(t *testing.T) {
	t.Parallel()
	tc := toolchain{goVersion: "go1.26.8", env: append([]string{"PATH=/usr/bin", "HOME=/home/builder", "GOCACHE=/cache"},
		append(slices.Clone(pinnedSettings), "GOTOOLCHAIN=go1.26.8")...)}
	p := platform{"linux", "arm64"}
	built := []builtProgram{{
		name:     "kplug",
		executed: []string{"build", "-trimpath", "-ldflags", "-s -w -X v=v1.2.3", "-o", "kplug", "./cmd/kplug"},
		info: &buildinfo.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{
			{Key: "-trimpath", Value: "true"}, {Key: "CGO_ENABLED", Value: "0"}, {Key: "GOARCH", Value: "arm64"}, {Key: "GOARM64", Value: "v8.0"},
		}},
	}}
	raw := []byte(`{"bomFormat":"CycloneDX","specVersion":"1.6","metadata":{"component":{"name":"kplug"}}}`)
	out, err := normalizeSBOM(raw, epoch, formulation(tc, p, built))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Formulation []json.RawMessage `json:"formulation"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || len(doc.Formulation) != 1 {
		t.Fatalf("formulation %s, %v", out, err)
	}
	var got, want any
	if err := json.Unmarshal(doc.Formulation[0], &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{
  "bom-ref": "kplug-release:formula",
  "components": [{"type": "application", "bom-ref": "kplug-release:go-toolchain", "name": "go", "version": "go1.26.8",
    "description": "the Go toolchain that compiled the programs: go.mod's toolchain line"}],
  "workflows": [{
    "bom-ref": "kplug-release:go-build", "uid": "go-build-linux-arm64", "name": "go build for linux/arm64",
    "description": "hack/release builds each program with the toolchain go.mod pins, in an environment it makes rather than inherits",
    "taskTypes": ["build"],
    "resourceReferences": [{"ref": "kplug-release:go-toolchain"}],
    "inputs": [{"environmentVars": [
      {"name": "GOENV", "value": "off"}, {"name": "GOWORK", "value": "off"}, {"name": "GOFLAGS", "value": "-mod=readonly"},
      {"name": "CGO_ENABLED", "value": "0"}, {"name": "GOAMD64", "value": "v1"}, {"name": "GOARM64", "value": "v8.0"},
      {"name": "GOFIPS140", "value": "off"}, {"name": "GOEXPERIMENT", "value": ""}, {"name": "GOSUMDB", "value": "sum.golang.org"},
      {"name": "GOTOOLCHAIN", "value": "go1.26.8"}, {"name": "GOOS", "value": "linux"}, {"name": "GOARCH", "value": "arm64"}]}],
    "steps": [{"name": "kplug", "commands": [{
      "executed": "go build -trimpath -ldflags '-s -w -X v=v1.2.3' -o kplug ./cmd/kplug",
      "properties": [
        {"name": "cdx:gomod:build:env:GOVERSION", "value": "go1.26.8"},
        {"name": "kplug:go:build:-trimpath", "value": "true"},
        {"name": "cdx:gomod:build:env:CGO_ENABLED", "value": "0"},
        {"name": "cdx:gomod:build:env:GOARCH", "value": "arm64"},
        {"name": "kplug:go:build:GOARM64", "value": "v8.0"}]}]}]
  }]
}`), &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("formulation (-want +got):\n%s", diff)
	}
}
