package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// modulePath is kplug's module path.
const modulePath = "github.com/kplug/kplug"

// goProxyDir is where the release writes kplug's module in the layout of a Go module proxy
// (GOPROXY=file://.../goproxy): what `go install github.com/kplug/kplug/cmd/kplug@VERSION`
// downloads, made from the same commit as the binaries.
const goProxyDir = "goproxy"

// writeModuleProxy writes the module at the commit c of the git checkout src, as version,
// into dir in the module proxy protocol's layout: @v/list, VERSION.info, .mod and .zip.
// The zip is made from git (the committed files, as the go command fetches a tag), not
// from the work tree, and holds no timestamps, so it is a function of the commit.
func writeModuleProxy(dir, src, version string, c commit) error {
	if err := module.Check(modulePath, version); err != nil {
		return fmt.Errorf("module proxy: %w", err)
	}
	at := filepath.Join(dir, filepath.FromSlash(modulePath), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	zf, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		return err
	}
	err = modzip.CreateFromVCS(zf, module.Version{Path: modulePath, Version: version}, src, c.revision, "")
	if cerr := zf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("module proxy: zipping the module at %s: %w", c.revision, err)
	}
	mod, err := readGitFile(src, c.revision, "go.mod")
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, c.time.UTC()})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": append(info, '\n'),
		version + ".mod":  mod,
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// readGitFile returns the file name as committed at revision in the git checkout src.
func readGitFile(src, revision, name string) ([]byte, error) {
	out, err := exec.Command("git", "-C", src, "show", revision+":"+name).Output() //nolint:noctx // a quick local read
	if err != nil {
		return nil, fmt.Errorf("module proxy: reading %s at %s: %w", name, revision, err)
	}
	return out, nil
}
