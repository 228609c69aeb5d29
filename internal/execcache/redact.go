package execcache

import (
	"regexp"
	"strings"
)

const redacted = "<redacted>"

// redactArgs hides what looks like a secret in a wrapped plugin's arguments, for --list
// and for messages. The entry file keeps them: it is as private as the credential in it.
// Hidden are the value of a flag whose name looks secret (--client-secret=V,
// --password V, --header V), and, in any other value or argument, what redactValue hides.
// A short flag's value (-p V) is shown: a one-letter name says nothing.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	hideNext := false
	for i, a := range args {
		if hideNext && !isFlag(a) {
			// The value of a secret flag, even one that starts with a dash.
			out[i], hideNext = redacted, false
			continue
		}
		hideNext = false
		if !strings.HasPrefix(a, "-") || a == "-" {
			out[i] = redactValue(a)
			continue
		}
		name, value, hasValue := strings.Cut(a, "=")
		secret := secretName(strings.TrimLeft(name, "-"))
		switch {
		case secret && hasValue:
			out[i] = name + "=" + redacted
		case hasValue:
			out[i] = name + "=" + redactValue(value)
		default:
			out[i], hideNext = a, secret
		}
	}
	return out
}

// isFlag reports whether a, after a flag that takes a value, is a flag of its own rather
// than that value: a long flag, "--", or a one-letter short flag.
func isFlag(a string) bool {
	return strings.HasPrefix(a, "--") || (len(a) == 2 && a[0] == '-')
}

// secretPart matches names that hold a secret anywhere in them (clientSecret, --api-key,
// --oidc-password, --refresh-token, --application-credential-id).
var secretPart = regexp.MustCompile(`(?i)secret|passw|passphrase|token|key|credential`)

// secretWords are the words of a name (split at - _ .) that make it secret:
// --pass, --user-pin, --auth, --header "Authorization: ...", --cookie, --client-assertion.
var secretWords = map[string]bool{
	"pass": true, "pw": true, "pwd": true, "pin": true, "auth": true, "authorization": true,
	"bearer": true, "header": true, "headers": true, "cookie": true, "cookies": true,
	"assertion": true, "jwt": true, "otp": true, "signature": true, "sig": true, "private": true,
	"creds": true,
}

// secretName reports whether a flag, parameter or field name looks like it names a secret.
func secretName(name string) bool {
	if secretPart.MatchString(name) {
		return true
	}
	for _, w := range strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
		if secretWords[w] {
			return true
		}
	}
	return false
}

// jwt matches a JSON Web Token: a JSON header and payload, base64url-encoded.
var jwt = regexp.MustCompile(`eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*`)

// redactValue hides what looks like a secret in a value or a plain argument: all of it
// when it is "Bearer V" or "Basic V", NAME=V or NAME: V with a secret-looking NAME, or a
// long random-looking string (an access key, a client secret); else a URL's password and
// its secret-looking query parameters, and JSON Web Tokens within it.
func redactValue(v string) string {
	lower := strings.ToLower(v)
	if strings.HasPrefix(lower, "bearer ") || strings.HasPrefix(lower, "basic ") || looksRandom(v) {
		return redacted
	}
	if i := strings.IndexAny(v, "=:"); i > 0 && !strings.HasPrefix(v[i:], "://") && isName(v[:i]) && secretName(v[:i]) {
		return v[:i+1] + redacted
	}
	return jwt.ReplaceAllString(redactURL(v), redacted)
}

// isName reports whether s could be a field or parameter name.
func isName(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool {
		return r != '-' && r != '_' && r != '.' && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9')
	}) < 0
}

// redactURL hides the password of a URL (scheme://user:password@host) and the values of
// its secret-looking query or fragment parameters (?client_secret=V,
// pkcs11:...?pin-value=V, #access_token=V), leaving every other byte as it was.
func redactURL(v string) string {
	if i := strings.Index(v, "://"); i >= 0 {
		rest := v[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 {
				v = v[:i+3] + rest[:c+1] + redacted + rest[at:]
			}
		}
	}
	q := strings.IndexAny(v, "?#")
	if q < 0 {
		return v
	}
	var b strings.Builder
	b.WriteString(v[:q+1])
	params := v[q+1:]
	start := 0
	for i := 0; i <= len(params); i++ {
		if i < len(params) && !strings.ContainsRune("&;?#", rune(params[i])) {
			continue
		}
		param := params[start:i]
		if name, _, ok := strings.Cut(param, "="); ok && secretName(name) {
			param = name + "=" + redacted
		}
		b.WriteString(param)
		if i < len(params) {
			b.WriteByte(params[i])
		}
		start = i + 1
	}
	return b.String()
}

// looksRandom reports whether v looks like generated key material rather than a name,
// a path, a UUID or an ARN: at least 32 characters of the base64 alphabets with upper and
// lower case letters and digits, or at least 32 hexadecimal digits with both letters and
// digits.
func looksRandom(v string) bool {
	if len(v) < 32 || strings.ContainsRune("/.~", rune(v[0])) {
		return false
	}
	var upper, lower, digit, nonHex bool
	for _, r := range v {
		switch {
		case 'A' <= r && r <= 'Z':
			upper = true
			nonHex = nonHex || r > 'F'
		case 'a' <= r && r <= 'z':
			lower = true
			nonHex = nonHex || r > 'f'
		case '0' <= r && r <= '9':
			digit = true
		case strings.ContainsRune("+/=_-~", r):
			nonHex = true
		default:
			return false
		}
	}
	hex := !nonHex && digit && (upper != lower)
	return hex || (upper && lower && digit)
}
