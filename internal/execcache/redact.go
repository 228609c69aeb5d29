package execcache

import (
	"regexp"
	"strings"
)

// secretFlag matches flag names whose value is likely a secret, e.g. --client-secret,
// --password, --token, --private-key.
var secretFlag = regexp.MustCompile(`(?i)secret|passw|token|key|credential`)

const redacted = "<redacted>"

// redactArgs hides the values of secret-looking flags (--name=value, or --name value) for
// --list. The entry file keeps them: it is as private as the credential in it.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	hideNext := false
	for i, a := range args {
		out[i] = a
		if !strings.HasPrefix(a, "-") { // a value, or a plain argument
			if hideNext {
				out[i] = redacted
			}
			hideNext = false
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		secret := secretFlag.MatchString(name)
		if secret && hasValue {
			out[i] = a[:strings.IndexByte(a, '=')+1] + redacted
		}
		hideNext = secret && !hasValue
	}
	return out
}
