package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// entry is one file of an archive or image layer.
type entry struct {
	name     string // slash-separated, relative; a directory ends in "/"
	mode     fs.FileMode
	uid, gid int
	data     []byte
}

// stageEntries lists the files of a platform's stage directory, sorted by name: the
// programs executable (0755), everything else 0644, owned by root.
func stageEntries(stage string, p platform) ([]entry, error) {
	files, err := os.ReadDir(stage)
	if err != nil {
		return nil, err
	}
	var entries []entry
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(stage, f.Name()))
		if err != nil {
			return nil, err
		}
		mode := fs.FileMode(0o644)
		for _, prog := range programs {
			if f.Name() == p.exe(prog) {
				mode = 0o755
			}
		}
		entries = append(entries, entry{name: f.Name(), mode: mode, data: data})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	return entries, nil
}

// packArchive packs the stage as the release archive of p: a zip on Windows, a gzipped
// tar elsewhere, with the files at the top level (as krew's `files: [{from: kplug, to:
// .}]` and Homebrew, Scoop and similar expect) and nothing of the build machine in it: the
// entries in name order, every time mtime, owner root.
func packArchive(stage string, p platform, mtime time.Time) ([]byte, error) {
	entries, err := stageEntries(stage, p)
	if err != nil {
		return nil, err
	}
	if p.os == "windows" {
		return zipEntries(entries, mtime)
	}
	return tarGz(entries, mtime)
}

// tarGz writes entries as a gzipped tar, with a gzip header that holds no name and no
// time.
func tarGz(entries []entry, mtime time.Time) ([]byte, error) {
	t, err := tarEntries(entries, mtime)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(t); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// tarEntries writes entries as an uncompressed tar (an image layer is one). Whole-second
// times and short names need no PAX records, so the headers are plain USTAR.
func tarEntries(entries []entry, mtime time.Time) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    int64(e.mode.Perm()),
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if e.mode.IsDir() {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// zipEntries writes entries as a zip, deflated, with the Unix modes in the external
// attributes (for unzip on Unix) and mtime as every entry's time.
func zipEntries(entries []entry, mtime time.Time) ([]byte, error) {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: mtime}
		h.SetMode(e.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
