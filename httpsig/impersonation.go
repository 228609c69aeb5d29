package httpsig

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// ImpersonationError refuses impersonation headers whose signed value could stand for
// other lines than those sent. A signature covers a field as its lines joined with ", "
// (RFC 9421 §2.1), while kube-apiserver reads Impersonate-Group and Impersonate-Extra-*
// line by line and only the first line of Impersonate-User and Impersonate-Uid. Without a
// comma in any value and with one line of each single-valued header, the lines are the
// signed value split at ", ": an intermediary can neither merge two signed lines into one
// ("g1, g2", a group of its own to kube-apiserver) nor split one.
type ImpersonationError struct {
	// Field is the header as the request spells it.
	Field string
	// Value is the value holding a comma; empty when Lines says what is wrong.
	Value string
	// Lines is the number of lines of a header kube-apiserver reads one line of.
	Lines int
}

func (e *ImpersonationError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("the request has %d %s lines, and kube-apiserver reads the first only: send one", e.Lines, e.Field)
	}
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("the %s value %q holds a comma: a signature covers the lines of a field joined with \", \", and kube-apiserver reads impersonation headers line by line, so lines could be merged or split without breaking the signature; send each value on a line of its own, with no comma in it", e.Field, v)
}

// CheckImpersonation returns an *ImpersonationError when an Impersonate-User,
// Impersonate-Uid, Impersonate-Group or Impersonate-Extra-* value in h holds a comma, or
// when Impersonate-User or Impersonate-Uid has more than one line; nil otherwise. The
// Signer refuses to sign such a request and the verifying proxy to forward it: then what a
// signature covers says which lines kube-apiserver acts on. Header names are matched in
// any case, also under keys that are not canonical.
func CheckImpersonation(h http.Header) error {
	names := make([]string, 0, len(h))
	for name := range h {
		if isImpersonation(strings.ToLower(name)) {
			names = append(names, name)
		}
	}
	sort.Strings(names) // one answer for one request
	lines := map[string]int{}
	for _, name := range names {
		l := strings.ToLower(name)
		for _, v := range h[name] {
			if strings.Contains(v, ",") {
				return &ImpersonationError{Field: name, Value: v}
			}
		}
		if l == "impersonate-user" || l == "impersonate-uid" {
			if lines[l] += len(h[name]); lines[l] > 1 {
				return &ImpersonationError{Field: http.CanonicalHeaderKey(l), Lines: lines[l]}
			}
		}
	}
	return nil
}

func isImpersonation(lower string) bool {
	switch lower {
	case "impersonate-user", "impersonate-uid", "impersonate-group":
		return true
	}
	return strings.HasPrefix(lower, "impersonate-extra-")
}
