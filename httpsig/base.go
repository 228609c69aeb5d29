package httpsig

import (
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// param is one signature parameter: its value is an int64 or a string.
type param struct {
	name  string
	value any
}

// signatureBase builds the RFC 9421 §2.5 signature base of req over components, ending
// with the @signature-params line whose value is params, the serialized inner list
// (RFC 9421 §2.3). Only derived components without parameters and header fields without
// parameters are supported: the profile needs no more.
func signatureBase(req *http.Request, components []string, params string) ([]byte, error) {
	// The values first, then one buffer of the exact size: the base is built on every
	// request a verifier checks, and growing it line by line showed in its profile.
	values := make([]string, len(components))
	size := len(`"@signature-params": `) + len(params)
	for i, c := range components {
		v, err := componentValue(req, c)
		if err != nil {
			return nil, err
		}
		values[i] = v
		size += len(c) + len(v) + len(`"": `+"\n")
	}
	b := make([]byte, 0, size)
	for i, c := range components {
		b = append(b, '"')
		b = append(b, c...)
		b = append(b, `": `...)
		b = append(b, values[i]...)
		b = append(b, '\n')
	}
	b = append(b, `"@signature-params": `...)
	b = append(b, params...)
	return b, nil
}

// serializeParams writes the inner list of components and params (RFC 8941 §4.1.1.1),
// for Signature-Input and the @signature-params line.
func serializeParams(components []string, params []param) string {
	var b strings.Builder
	// One allocation, not one per doubling: a verifier writes this line on every request.
	size := 2
	for _, c := range components {
		size += len(c) + 3
	}
	for _, p := range params {
		size += len(p.name) + 4
		if v, ok := p.value.(string); ok {
			size += len(v)
		} else {
			size += 20
		}
	}
	b.Grow(size)
	b.WriteByte('(')
	for i, c := range components {
		if i > 0 {
			b.WriteByte(' ')
		}
		writeSFString(&b, c)
	}
	b.WriteByte(')')
	for _, p := range params {
		b.WriteByte(';')
		b.WriteString(p.name)
		b.WriteByte('=')
		switch v := p.value.(type) {
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case string:
			writeSFString(&b, v)
		}
	}
	return b.String()
}

// writeSFString writes s as a structured field string; s is printable ASCII (checked
// where it enters).
func writeSFString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for {
		i := strings.IndexAny(s, `"\`)
		if i < 0 {
			break
		}
		b.WriteString(s[:i])
		b.WriteByte('\\')
		b.WriteByte(s[i])
		s = s[i+1:]
	}
	b.WriteString(s)
	b.WriteByte('"')
}

// componentValue is the value of one covered component of req (RFC 9421 §2.1, §2.2).
func componentValue(req *http.Request, c string) (string, error) {
	switch c {
	case "@method":
		if req.Method == "" {
			return http.MethodGet, nil
		}
		return req.Method, nil
	case "@authority":
		return authority(req), nil
	case "@path":
		p, _ := target(req)
		return p, nil
	case "@query":
		_, q := target(req)
		return "?" + q, nil
	}
	if strings.HasPrefix(c, "@") {
		return "", fmt.Errorf("derived component %s is not supported", Quote(c))
	}
	if c == "" || strings.ToLower(c) != c {
		return "", fmt.Errorf("component %s is not a lowercase field name", Quote(c))
	}
	v, ok := fieldValue(req.Header, c)
	if !ok {
		return "", fmt.Errorf("covered field %s is not on the request", Quote(c))
	}
	return v, nil
}

// fieldValue is RFC 9421 §2.1's value of a header field: each field line's value trimmed,
// joined with ", ". name is lowercase; a header set under a non-canonical key is found too,
// in the order Go writes keys (sorted). The second result is false when the field is absent.
func fieldValue(h http.Header, name string) (string, bool) {
	canon := http.CanonicalHeaderKey(name)
	vs, found := h[canon]
	if extra := otherKeys(h, name, canon); len(extra) > 0 {
		found = true
		keys := append(extra, canon)
		sort.Strings(keys)
		vs = nil
		for _, k := range keys {
			vs = append(vs, h[k]...)
		}
	}
	if !found || len(vs) == 0 {
		return "", false
	}
	if len(vs) == 1 {
		return strings.Trim(vs[0], " \t"), true
	}
	trimmed := make([]string, len(vs))
	for i, v := range vs {
		trimmed[i] = strings.Trim(v, " \t")
	}
	return strings.Join(trimmed, ", "), true
}

// otherKeys returns h's keys that name the field name but are not its canonical form
// canon: what a caller wrote into the map directly.
func otherKeys(h http.Header, name, canon string) []string {
	var ks []string
	for k := range h {
		if k != canon && strings.EqualFold(k, name) {
			ks = append(ks, k)
		}
	}
	return ks
}

// authority is @authority (RFC 9421 §2.2.3): the host the request is for, lowercase,
// without the scheme's default port. The scheme is the URL's (a client request), else
// https when the request came over TLS (a server request).
func authority(req *http.Request) string {
	host := req.Host
	if host == "" && req.URL != nil {
		host = req.URL.Host
	}
	host = strings.ToLower(host)
	scheme := ""
	if req.URL != nil {
		scheme = strings.ToLower(req.URL.Scheme)
	}
	if scheme == "" {
		scheme = "http"
		if req.TLS != nil {
			scheme = "https"
		}
	}
	if h, port, err := net.SplitHostPort(host); err == nil {
		if (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
			if strings.Contains(h, ":") {
				return "[" + h + "]"
			}
			return h
		}
	}
	return host
}

// Target is the values of @path and @query (the latter without its "?") that Verify
// computes for req: a proxy that forwards a verified request compares them with what it
// sends.
func Target(req *http.Request) (path, query string) { return target(req) }

// target is the request target's path and raw query, as on the wire: a server request's
// RequestURI when it is in origin form, else what Go's client writes from the URL.
func target(req *http.Request) (path, query string) {
	if strings.HasPrefix(req.RequestURI, "/") {
		path, query, _ = strings.Cut(req.RequestURI, "?")
		return path, query
	}
	if req.URL == nil {
		return "/", ""
	}
	path = req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	return path, req.URL.RawQuery
}
