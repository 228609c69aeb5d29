// Package output prints a command's structured result as the user asked with -o: JSON or
// YAML of the same fields, or the command's own text. It is the one place kplug's commands
// agree on what -o accepts and how JSON and YAML are laid out.
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// The formats -o accepts. Text is each command's own human-readable layout.
const (
	Text = "text"
	JSON = "json"
	YAML = "yaml"
)

// Structured are the formats Write prints.
var Structured = []string{JSON, YAML}

// Check returns an error naming the accepted formats when format is not one of allowed.
func Check(format string, allowed ...string) error {
	if slices.Contains(allowed, format) {
		return nil
	}
	return fmt.Errorf("invalid --output %q: want %s", format, list(allowed))
}

// list joins names as "a, b or c".
func list(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Write prints v as JSON (indented by two spaces, HTML characters as they are, one
// trailing newline) or YAML (the same fields, by their JSON names). Any other format is
// an error: text output is the caller's.
func Write(w io.Writer, format string, v any) error {
	switch format {
	case JSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	case YAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("output: %q is not a structured format", format)
}

// IsStructured reports whether Write prints format.
func IsStructured(format string) bool { return slices.Contains(Structured, format) }
