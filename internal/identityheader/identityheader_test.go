package identityheader

import (
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/google/go-cmp/cmp"
)

// Set removes every identity header a client sent, whatever its case, before writing the
// verified user: a client must never add a group, an extra or a second user.
func TestSetStripsWhatTheClientSent(t *testing.T) {
	n := Names{Username: []string{"X-Remote-User", "X-User"}, Group: []string{"X-Remote-Group"}, UID: []string{"X-Remote-Uid"}, ExtraPrefix: []string{"X-Remote-Extra-", "X-Extra-"}}
	h := http.Header{}
	h["x-remote-user"] = []string{"mallory"} // not canonical: as an HTTP/2 client or a raw map write leaves it
	h.Set("X-User", "mallory")
	h.Add("X-Remote-Group", "system:masters")
	h["x-extra-scopes"] = []string{"admin"}
	h.Set("X-Remote-Extra-Scopes", "admin")
	h.Set("Accept", "application/json")
	n.Set(h, &User{Name: "alice", Groups: []string{"dev", "ops"}, Extra: map[string][]string{"acme.com/team": {"a", "b"}}})
	want := http.Header{
		"Accept":                         {"application/json"},
		"X-Remote-User":                  {"alice"},
		"X-Remote-Group":                 {"dev", "ops"},
		"X-Remote-Extra-Acme.com%2fteam": {"a", "b"}, // Add canonicalises the key
	}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("headers after Set (-want +got):\n%s", diff)
	}
	n.Set(h, nil)
	if diff := cmp.Diff(http.Header{"Accept": {"application/json"}}, h); diff != "" {
		t.Errorf("Set(nil) leaves identity (-want +got):\n%s", diff)
	}
}

// Read reads as kube-apiserver's request-header authenticator does: the first username
// and UID header with a value, the groups of every group header, extra keys lowercased
// and then path-unescaped (a key that does not unescape is kept).
func TestReadAsKubeAPIServer(t *testing.T) {
	n := Names{Username: []string{"X-Remote-User", "X-User"}, Group: []string{"X-Remote-Group", "X-Group"}, UID: []string{"X-Remote-Uid"}, ExtraPrefix: []string{"X-Remote-Extra-"}}
	h := http.Header{
		"X-User":                         {"bob"},
		"X-Remote-Group":                 {"a"},
		"X-Group":                        {"b", "c"},
		"X-Remote-Uid":                   {"42"},
		"X-Remote-Extra-Acme.com%2Fteam": {"x"},
		"X-Remote-Extra-Bad%zz":          {"y"},
	}
	want := &User{Name: "bob", UID: "42", Groups: []string{"a", "b", "c"}, Extra: map[string][]string{"acme.com/team": {"x"}, "bad%zz": {"y"}}}
	if diff := cmp.Diff(want, n.Read(h)); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}
	if u := n.Read(http.Header{"X-Remote-Group": {"a"}}); u != nil {
		t.Errorf("Read without a user = %+v, want nil", u)
	}
	// What Set writes, Read reads back.
	u := &User{Name: "carol", UID: "7", Groups: []string{"g"}, Extra: map[string][]string{"scopes": {"s1", "s2"}}}
	out := http.Header{}
	Default.Set(out, u)
	if diff := cmp.Diff(u, Default.Read(out)); diff != "" {
		t.Errorf("Read(Set(u)) (-want +got):\n%s", diff)
	}
}

// An extra key may hold any character kube-apiserver accepts (example.com/team:role=x);
// the header name that carries it must still be a valid one, and read back as the key.
// url.PathEscape left ':', '=' and '@', and Go's transport refused the request.
func TestExtraKeysMakeValidHeaderNames(t *testing.T) {
	keys := []string{"example.com/team:role=x", "a@b", "100%", "sp ace", "é"}
	u := &User{Name: "alice", Extra: map[string][]string{}}
	for _, k := range keys {
		u.Extra[k] = []string{"v"}
	}
	h := http.Header{}
	Default.Set(h, u)
	for name := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			t.Errorf("invalid header name %q", name)
		}
	}
	got := Default.Read(h)
	for _, k := range keys {
		want := strings.ToLower(k) // kube-apiserver lowercases before it unescapes
		if len(got.Extra[want]) != 1 {
			t.Errorf("key %q read back as %v", k, got.Extra)
		}
	}
}
