package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"
)

const (
	krewManifest  = "kplug.krew.yaml"
	checksumsFile = "SHA256SUMS"
)

// writeKrewManifest renders the krew plugin manifest template (deploy/krew/kplug.yaml)
// for version with the archives built: {{archive "linux" "amd64"}} is an archive's file
// name and {{sha256 "linux" "amd64"}} its digest. A platform the template names that was
// not built is an error, so that the manifest never points at an archive the release lacks.
func writeKrewManifest(tmplPath, out, version string, built []archive) error {
	text, err := os.ReadFile(tmplPath)
	if err != nil {
		return err
	}
	find := func(goos, goarch string) (archive, error) {
		for _, a := range built {
			if a.platform == (platform{goos, goarch}) {
				return a, nil
			}
		}
		return archive{}, fmt.Errorf("the krew manifest names %s/%s, which this release did not build", goos, goarch)
	}
	t, err := template.New(filepath.Base(tmplPath)).Option("missingkey=error").Funcs(template.FuncMap{
		"archive": func(goos, goarch string) (string, error) {
			a, err := find(goos, goarch)
			return a.name, err
		},
		"sha256": func(goos, goarch string) (string, error) {
			a, err := find(goos, goarch)
			return a.sha256, err
		},
	}).Parse(string(text))
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, map[string]string{"Version": version}); err != nil {
		return fmt.Errorf("rendering %s: %w", tmplPath, err)
	}
	return os.WriteFile(out, b.Bytes(), 0o644)
}

// writeChecksums writes SHA256SUMS for the files at the top of dir, as sha256sum prints
// them (`sha256sum -c SHA256SUMS` checks a download), sorted by name.
func writeChecksums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var lines []string
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == checksumsFile {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		lines = append(lines, hex.EncodeToString(sum[:])+"  "+e.Name()+"\n")
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	return os.WriteFile(filepath.Join(dir, checksumsFile), []byte(strings.Join(lines, "")), 0o644)
}
