package kuberc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Loaded is the kuberc a program found, as kubectl finds it.
type Loaded struct {
	// Path is the file the Preference came from; empty when kuberc is off or no usable
	// file was found.
	Path string
	// Preference is nil when there is none (then every plugin may run).
	Preference *Preference
	// Warnings are what kubectl warns about on stderr and goes on: a default file it
	// could not use (its policy then does not apply), fields it ignored.
	Warnings []string
}

// Policy is the Preference's policy, or the zero Policy (allow all) without one.
func (l *Loaded) Policy() Policy {
	if l == nil || l.Preference == nil {
		return Policy{}
	}
	return l.Preference.Policy
}

// Load finds the kuberc file (Locate), reads it and decodes it (Decode), and validates its
// policy, as kubectl 1.36 does before it runs any command:
//
//   - a file named by Options.Path or $KUBERC must exist and hold a usable Preference;
//   - the default file may be missing (no kuberc), and when it cannot be read or holds no
//     usable Preference, kubectl warns and goes on without it, and so does Load;
//   - unknown and duplicate fields are ignored, with a warning;
//   - an invalid policy is an error (an *InvalidPolicyError inside), whatever the file;
//     Load then returns the Loaded too, whose warnings may say why (a misspelt field).
//
// Errors name the file and say what is wrong with it.
func Load(o Options) (*Loaded, error) {
	path, explicit, err := Locate(o)
	if err != nil || path == "" {
		return &Loaded{}, err
	}
	l := &Loaded{}
	data, err := os.ReadFile(path) //nolint:gosec // the user's own kuberc, as kubectl reads it
	var pref *Preference
	if err == nil {
		if pref, err = Decode(data); err != nil {
			err = fmt.Errorf("%s: %w", path, err)
		}
	}
	switch {
	case explicit && err != nil:
		return nil, fmt.Errorf("kuberc: %w", err)
	case errors.Is(err, fs.ErrNotExist):
		return l, nil
	case err != nil:
		l.Warnings = append(l.Warnings, fmt.Sprintf("kuberc: no preferences loaded from %s: %v", path, err))
		return l, nil
	case pref == nil:
		return l, nil
	}
	l.Path, l.Preference = path, pref
	if len(pref.Ignored) > 0 {
		l.Warnings = append(l.Warnings, fmt.Sprintf("kuberc: ignoring unknown or duplicate fields in %s: %s", path, strings.Join(pref.Ignored, ", ")))
	}
	if err := pref.Policy.Validate(); err != nil {
		return l, fmt.Errorf("kuberc: %s: %w", path, err)
	}
	return l, nil
}
