package main

import (
	"fmt"
	"slices"
	"strings"
)

// An api maps each feature to the contexts it is part of, as a bit per index in contexts.
type api map[feature]ctxSet

type ctxSet uint

// everywhere is the set of all contexts: a feature there has no context in its line.
var everywhere ctxSet = 1<<len(contexts) - 1

// recordHeader opens the record, which says what it is to someone who finds it in a diff.
const recordHeader = `# The public API of the module: one line per exported name, field, method, interface
# method set and struct comparability, with types and signatures (parameter names left out).
# A line marked (linux), (darwin) or (windows) holds only there; the others hold in all three.
# hack/apicheck writes it (make api-record) and make lint fails while the code differs from
# it; see docs/development.md, "The API record". Do not edit it by hand.
`

// lines is the API as the record's lines, sorted.
func (a api) lines() []string {
	var out []string
	for f, set := range a {
		out = append(out, f.lines(set)...)
	}
	slices.Sort(out)
	return out
}

// lines are the record's lines for a feature that holds in set.
func (f feature) lines(set ctxSet) []string {
	if set == everywhere {
		return []string{"pkg " + f.pkg + ", " + f.text}
	}
	var out []string
	for i, bc := range contexts {
		if set&(1<<i) != 0 {
			out = append(out, "pkg "+f.pkg+" ("+bc.name+"), "+f.text)
		}
	}
	return out
}

func formatRecord(a api) []byte {
	var b strings.Builder
	b.WriteString(recordHeader)
	for _, line := range a.lines() {
		b.WriteString(line + "\n")
	}
	return []byte(b.String())
}

// parseRecord reads a record; name is its file's, for errors.
func parseRecord(name string, data []byte) (api, error) {
	a := api{}
	for i, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		head, text, ok := strings.Cut(line, ", ")
		pkg, found := strings.CutPrefix(head, "pkg ")
		if !ok || !found || pkg == "" || text == "" {
			return nil, fmt.Errorf("%s:%d: want \"pkg PATH, FEATURE\", have %q; make api-record rewrites the record", name, i+1, line)
		}
		set := everywhere
		if path, ctx, marked := strings.Cut(pkg, " ("); marked {
			c := slices.IndexFunc(contexts, func(bc buildContext) bool { return bc.name+")" == ctx })
			if c < 0 {
				return nil, fmt.Errorf("%s:%d: unknown context %q; make api-record rewrites the record", name, i+1, "("+ctx)
			}
			pkg, set = path, 1<<c
		}
		a[feature{pkg: pkg, text: text}] |= set
	}
	return a, nil
}

// A difference is what changed between the record and the code, as record lines.
type difference struct {
	// incompatible are the lines the code no longer has: a removed name, a changed
	// signature or type, a method added to an interface that others implement, ...
	incompatible []string
	// compatible are the lines only the code has (additions), and lines it no longer has
	// whose replacement keeps every use working.
	compatible []string
	// names are the names the incompatible lines are about, as a changelog entry names
	// them: "execcred.New", "execcred.Options"; a package removed whole is named by path.
	names []string
}

func (d difference) empty() bool { return len(d.incompatible) == 0 && len(d.compatible) == 0 }

// compare classifies how the API of the code differs from the record's. A feature gone (in
// a context) is incompatible, a new one compatible; the one exception is a method that
// moves from the pointer receiver to the value receiver, which only adds it to the value's
// method set.
func compare(record, code api) difference {
	var d difference
	gone, added := api{}, api{}
	for f, set := range record {
		if lost := set &^ code[f]; lost != 0 {
			gone[f] = lost
		}
	}
	for f, set := range code {
		if more := set &^ record[f]; more != 0 {
			added[f] = more
		}
	}
	packages := map[string]bool{}
	for f := range code {
		packages[f.pkg] = true
	}
	names := map[string]bool{}
	for f, set := range gone {
		if rest, ok := strings.CutPrefix(f.text, "method (*"); ok {
			value := feature{pkg: f.pkg, text: "method (" + rest}
			if code[value]&set == set {
				d.compatible = append(d.compatible, prefixed("- ", f.lines(set))...)
				continue
			}
		}
		d.incompatible = append(d.incompatible, prefixed("- ", f.lines(set))...)
		if packages[f.pkg] {
			names[f.pkg+"."+f.name()] = true
		} else {
			names[f.pkg] = true
		}
	}
	for f, set := range added {
		d.compatible = append(d.compatible, prefixed("+ ", f.lines(set))...)
	}
	sortLines(d.incompatible)
	sortLines(d.compatible)
	for name := range names {
		d.names = append(d.names, name)
	}
	slices.Sort(d.names)
	return d
}

// name is the top-level name a feature is about: a method's or field's type, for instance.
func (f feature) name() string {
	kind, rest, _ := strings.Cut(f.text, " ")
	if kind == "method" {
		recv, _, _ := strings.Cut(strings.TrimPrefix(rest, "("), ")")
		rest = strings.TrimPrefix(recv, "*")
	}
	if i := strings.IndexAny(rest, " [(,"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

func prefixed(prefix string, lines []string) []string {
	out := make([]string, len(lines))
	for i, line := range lines {
		out[i] = prefix + line
	}
	return out
}

// sortLines sorts "- line" and "+ line" by line, so that a change reads as its old line
// then its new one.
func sortLines(lines []string) {
	slices.SortFunc(lines, func(a, b string) int {
		if c := strings.Compare(a[2:], b[2:]); c != 0 {
			return c
		}
		return -strings.Compare(a[:1], b[:1]) // "-" before "+"
	})
}
