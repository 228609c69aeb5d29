package main

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
)

// A changelog is what the rule on incompatible changes reads of CHANGELOG.md: its top
// section, the one for the next release, and whether a released one follows it.
type changelog struct {
	heading  string // the top section's heading line, "## Unreleased"
	top      string // the top section, heading included
	released bool   // whether a section follows: an API went out that a change can break
}

// readChangelog reads the "## " sections of a changelog. A missing file is one with no
// release in it.
func readChangelog(name string) (changelog, error) {
	data, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return changelog{}, nil
	}
	if err != nil {
		return changelog{}, err
	}
	var c changelog
	var top strings.Builder
	sections := 0
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "## ") {
			sections++
			if sections == 1 {
				c.heading = strings.TrimSpace(line)
			}
		}
		if sections == 1 {
			top.WriteString(line)
		}
	}
	c.top = top.String()
	c.released = sections > 1
	return c, nil
}

// unmentioned returns the names the top section does not mention as whole words. A name
// in a package of a subdirectory may also be written with the package's name alone, as
// code writes it: plugin.Options for execcred/plugin.Options.
func (c changelog) unmentioned(names []string) []string {
	var missing []string
	for _, name := range names {
		short := name
		if dir, base := path.Split(name); dir != "" && strings.Contains(base, ".") {
			short = base
		}
		if !mentions(c.top, name) && !mentions(c.top, short) {
			missing = append(missing, name)
		}
	}
	return missing
}

func mentions(text, name string) bool {
	return regexp.MustCompile(`(^|[^\w/.])` + regexp.QuoteMeta(name) + `($|[^\w/])`).MatchString(text)
}
