package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
)

// What the release writes as a module proxy is what `go install
// github.com/kplug/kplug/cmd/kplug@VERSION` installs, and the program says it is VERSION.
// The version is HEAD's pseudo-version, whose zip the module cache may keep: it is the
// commit's content, as any proxy would serve it (a made-up v0.1.0 there would shadow the
// real one). The dependencies come from this machine's module cache, used as a second
// proxy, so nothing is fetched and nothing but kplug is compiled. A file proxy serves no
// checksum database: kplug's go.sum, in the zip, checks the dependencies (GOSUMDB=off).
// It builds kplug (a minute or more), so it runs with make release-check.
func TestGoInstallFromTheReleasesModuleProxy(t *testing.T) {
	if os.Getenv("KPLUG_RELEASE_CHECK") == "" {
		t.Skip("builds kplug from a module zip: set KPLUG_RELEASE_CHECK=1 (make release-check)")
	}
	src, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	c, err := readCommit(t.Context(), src, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	version := module.PseudoVersion("", "", c.time, c.revision[:12])
	if err := writeModuleProxy(filepath.Join(dir, goProxyDir), src, version, c); err != nil {
		t.Fatal(err)
	}
	goEnv := func(name string) string {
		out, err := exec.CommandContext(t.Context(), "go", "env", name).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	downloads := filepath.Join(goEnv("GOMODCACHE"), "cache", "download")
	bin := filepath.Join(dir, "bin")
	install := exec.CommandContext(t.Context(), "go", "install", modulePath+"/cmd/kplug@"+version)
	install.Env = append(os.Environ(),
		"GOPROXY=file://"+filepath.ToSlash(filepath.Join(dir, goProxyDir))+",file://"+filepath.ToSlash(downloads),
		"GOFLAGS=", "GOBIN="+bin,
		"GOSUMDB=off", "GOTOOLCHAIN=local", "GOWORK=off")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install @%s: %v\n%s", version, err, out)
	}
	out, err := exec.CommandContext(t.Context(), filepath.Join(bin, "kplug"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "kplug: "+version+"\n") {
		t.Errorf("kplug version after go install @%s:\n%s", version, out)
	}
}
