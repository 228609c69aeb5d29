// Command apicheck keeps the module's public API and its record, api/kplug.txt, equal, so
// that the API is reviewed wherever it changes and an incompatible change is never made by
// accident. make lint checks (any difference fails); make api-record writes the record
// (-write), and refuses an incompatible change that CHANGELOG.md's top section does not
// name once a release is out. docs/development.md, "The API record", has the rules.
//
//	go run ./hack/apicheck          # make lint
//	go run ./hack/apicheck -write   # make api-record
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	o := options{dir: "."}
	flag.BoolVar(&o.write, "write", false, "write the record from the code instead of checking the code against it")
	flag.StringVar(&o.record, "record", "api/kplug.txt", "the record, relative to the module's root")
	flag.StringVar(&o.changelog, "changelog", "CHANGELOG.md", "the changelog, relative to the module's root")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "apicheck: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
}

type options struct {
	dir       string // the module's root
	record    string // relative to dir
	changelog string // relative to dir
	write     bool
}

// run checks the code's API against the record, or writes the record; what it has to say
// goes to w.
func run(ctx context.Context, o options, w io.Writer) error {
	recordFile := filepath.Join(o.dir, o.record)
	data, err := os.ReadFile(recordFile)
	exists := err == nil
	switch {
	case errors.Is(err, fs.ErrNotExist) && o.write:
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s is missing: make api-record writes it from the code", o.record)
	case err != nil:
		return err
	}
	record, err := parseRecord(o.record, data)
	if err != nil {
		return err
	}
	code, err := loadAPI(ctx, o.dir)
	if err != nil {
		return err
	}
	d := compare(record, code)
	notes, err := readChangelog(filepath.Join(o.dir, o.changelog))
	if err != nil {
		return err
	}
	if o.write {
		return write(o, w, recordFile, code, d, notes, exists)
	}
	if d.empty() {
		fmt.Fprintf(w, "apicheck: the public API matches %s\n", o.record)
		return nil
	}
	report(w, o.record, d)
	if len(d.incompatible) == 0 {
		return fmt.Errorf("the public API has additions that %s lacks: record them with make api-record and commit the record with them", o.record)
	}
	if !notes.released {
		return fmt.Errorf("the public API changed incompatibly (%s); %s names no release yet, so no entry is needed there: record the change deliberately with make api-record and commit the record with it", strings.Join(d.names, ", "), o.changelog)
	}
	return fmt.Errorf("the public API changed incompatibly (%s), which breaks code written for the last release: name each of them in an entry of the top section of %s (%s), then record the change deliberately with make api-record and commit the record with it", strings.Join(d.names, ", "), o.changelog, notes.heading)
}

// write writes the record, unless the change is incompatible, a release is out, and the
// changelog's top section does not name what changed.
func write(o options, w io.Writer, recordFile string, code api, d difference, notes changelog, exists bool) error {
	if exists && len(d.incompatible) > 0 && notes.released {
		if missing := notes.unmentioned(d.names); len(missing) > 0 {
			report(w, o.record, d)
			return fmt.Errorf("not writing %s: the change is incompatible, and the top section of %s (%s) does not name %s: add an entry that does, then run make api-record again", o.record, o.changelog, notes.heading, strings.Join(missing, ", "))
		}
	}
	if exists && d.empty() {
		fmt.Fprintf(w, "apicheck: %s is up to date\n", o.record)
		return nil
	}
	if exists {
		report(w, o.record, d)
	}
	if err := os.MkdirAll(filepath.Dir(recordFile), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(recordFile, formatRecord(code), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "apicheck: wrote %s (%d lines): review its diff, and commit it with the change\n", o.record, len(code.lines()))
	return nil
}

// report lists the lines that differ between the record and the code.
func report(w io.Writer, record string, d difference) {
	fmt.Fprintf(w, "apicheck: the public API differs from %s:\n", record)
	if len(d.incompatible) > 0 {
		fmt.Fprintln(w, "incompatible: removed or changed, so code that uses them may no longer compile:")
		for _, line := range d.incompatible {
			fmt.Fprintln(w, "  "+line)
		}
	}
	if len(d.compatible) > 0 {
		fmt.Fprintln(w, "compatible: added, or changed without breaking any use:")
		for _, line := range d.compatible {
			fmt.Fprintln(w, "  "+line)
		}
	}
}
