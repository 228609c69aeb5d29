// Package identityheader writes and reads front-proxy identity: the headers (X-Remote-User,
// X-Remote-Group, ...) in which a proxy holding the front-proxy client certificate tells
// kube-apiserver, or a peer, who sent a request. kplug peerproxy, the mixed version proxy
// filter and kplug signature-proxy all write them here, so that stripping what a client
// sent and setting the verified user happen the same way everywhere. It links nothing but
// the standard library, so that mvproxy does not pull client-go's clientset with it.
package identityheader

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Names are the identity header names of a front proxy, as kube-apiserver's
// --requestheader-* flags name them: it sets the first of each list (the first of
// ExtraPrefix prefixes every extra key) and removes every name, and every header under
// an ExtraPrefix, from its clients' requests.
type Names struct {
	Username, Group, UID, ExtraPrefix []string
}

// Default are kubeadm's names.
var Default = Names{
	Username:    []string{"X-Remote-User"},
	Group:       []string{"X-Remote-Group"},
	UID:         []string{"X-Remote-Uid"},
	ExtraPrefix: []string{"X-Remote-Extra-"},
}

// User is the identity a front proxy asserts: what kube-apiserver reads from the headers
// into its user.Info.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Strip removes from h every header n names, and every header under one of its extra
// prefixes, in any case: what kube-apiserver would believe from a request carrying the
// front-proxy client certificate. A client must never get one of them through.
//
// Keys are compared without regard to case, not only in their canonical form: a key that
// is not canonical in h (put there by code, not by Go's server) is still written on the
// wire, and the server behind reads it canonicalised.
func (n Names) Strip(h http.Header) {
	for name := range h {
		if n.names(name) {
			delete(h, name)
		}
	}
}

// names reports whether header name is one of n's, or under one of its extra prefixes.
func (n Names) names(name string) bool {
	for _, list := range [][]string{n.Username, n.Group, n.UID} {
		for _, s := range list {
			if strings.EqualFold(name, s) {
				return true
			}
		}
	}
	for _, prefix := range n.ExtraPrefix {
		if len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix) {
			return true
		}
	}
	return false
}

// Set strips h (Strip) and, when u is not nil, writes u into the first name of each
// list, as kube-apiserver reads them: the user; the UID unless empty; one field per
// group; one per extra value, under the first extra prefix followed by the key, escaped
// (escapeKey). A list that is empty (an apiserver without --requestheader-uid-headers)
// carries nothing. This is the one place kplug writes front-proxy identity.
func (n Names) Set(h http.Header, u *User) {
	n.Strip(h)
	if u == nil {
		return
	}
	if len(n.Username) > 0 {
		h.Set(n.Username[0], u.Name)
	}
	if u.UID != "" && len(n.UID) > 0 {
		h.Set(n.UID[0], u.UID)
	}
	if len(n.Group) > 0 {
		for _, g := range u.Groups {
			h.Add(n.Group[0], g)
		}
	}
	if len(n.ExtraPrefix) > 0 {
		for k, vs := range u.Extra {
			name := n.ExtraPrefix[0] + escapeKey(k)
			for _, v := range vs {
				h.Add(name, v)
			}
		}
	}
}

// Read returns the user a trusted front proxy asserted in h, as kube-apiserver reads it
// (the user and UID from the first of their headers that has a value; the groups of every
// group header; extra keys lowercased, then path-unescaped), or nil when h names no user. Call it only for a request whose client
// certificate proved it came from such a proxy.
func (n Names) Read(h http.Header) *User {
	name := first(h, n.Username)
	if name == "" {
		return nil
	}
	u := &User{Name: name, UID: first(h, n.UID)}
	for _, g := range n.Group {
		u.Groups = append(u.Groups, h.Values(g)...)
	}
	u.Groups = slices.Clip(u.Groups)
	for k, vs := range h {
		for _, prefix := range n.ExtraPrefix {
			if len(k) < len(prefix) || !strings.EqualFold(k[:len(prefix)], prefix) {
				continue
			}
			key := strings.ToLower(k[len(prefix):])
			if unescaped, err := url.PathUnescape(key); err == nil {
				key = unescaped // a key that does not unescape is kept as it came
			}
			if u.Extra == nil {
				u.Extra = map[string][]string{}
			}
			u.Extra[key] = append(u.Extra[key], vs...)
		}
	}
	return u
}

// first is the value of the first header of names that h has.
func first(h http.Header, names []string) string {
	for _, name := range names {
		if v := h.Get(name); v != "" {
			return v
		}
	}
	return ""
}

// escapeKey writes an extra key as a header name may carry it, as client-go's front proxy
// does: every byte that is not a token character (RFC 9110), and every '%', as %XX, which
// kube-apiserver's url.PathUnescape reads back. url.PathEscape leaves ':', '=' and '@',
// which no header name may hold, so a key such as "example.com/team:role" made every
// request fail.
func escapeKey(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c != '%' && tokenByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// tokenByte reports whether c may appear in a header name (RFC 9110, token).
func tokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
