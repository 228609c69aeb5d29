package httpsig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
)

func TestCheckImpersonation(t *testing.T) {
	t.Parallel()
	const merged = `the Impersonate-Group value "g1, g2" holds a comma: a signature covers the lines of a field joined with ", ", and kube-apiserver reads impersonation headers line by line, so lines could be merged or split without breaking the signature; send each value on a line of its own, with no comma in it`
	for _, tc := range []struct {
		name string
		h    http.Header
		want string
	}{
		{"none", http.Header{"Accept": {"a, b"}}, ""},
		{"one value a line", http.Header{"Impersonate-User": {"viewer"}, "Impersonate-Uid": {"42"}, "Impersonate-Group": {"g1", "g2"},
			"Impersonate-Extra-Scopes": {"read", "write"}}, ""},
		{"groups merged", http.Header{"Impersonate-Group": {"g1, g2"}}, merged},
		{"a group with a comma beside others", http.Header{"Impersonate-Group": {"g0", "g1,g2"}},
			`the Impersonate-Group value "g1,g2" holds a comma: a signature covers the lines of a field joined with ", ", and kube-apiserver reads impersonation headers line by line, so lines could be merged or split without breaking the signature; send each value on a line of its own, with no comma in it`},
		{"user", http.Header{"Impersonate-User": {"viewer, kplug-admin"}},
			`the Impersonate-User value "viewer, kplug-admin" holds a comma: a signature covers the lines of a field joined with ", ", and kube-apiserver reads impersonation headers line by line, so lines could be merged or split without breaking the signature; send each value on a line of its own, with no comma in it`},
		{"extra, key not canonical", http.Header{"impersonate-extra-scopes": {"read,write"}},
			`the impersonate-extra-scopes value "read,write" holds a comma: a signature covers the lines of a field joined with ", ", and kube-apiserver reads impersonation headers line by line, so lines could be merged or split without breaking the signature; send each value on a line of its own, with no comma in it`},
		{"user split", http.Header{"Impersonate-User": {"viewer", "kplug-admin"}}, "the request has 2 Impersonate-User lines, and kube-apiserver reads the first only: send one"},
		{"uid under two spellings", http.Header{"Impersonate-Uid": {"1"}, "impersonate-uid": {"2"}}, "the request has 2 Impersonate-Uid lines, and kube-apiserver reads the first only: send one"},
		{"long value", http.Header{"Impersonate-Group": {"a," + strings.Repeat("x", 100)}},
			`the Impersonate-Group value "a,` + strings.Repeat("x", 62) + `..." holds a comma: a signature covers the lines of a field joined with ", ", and kube-apiserver reads impersonation headers line by line, so lines could be merged or split without breaking the signature; send each value on a line of its own, with no comma in it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ""
			if err := CheckImpersonation(tc.h); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestSecuritySignerRefusesAmbiguousImpersonation (issue 27 review of N2, F6): a value
// with a comma signs the same as the lines it would be split into, so kplug's signer does
// not sign it, rather than make a signature whose meaning an intermediary chooses. The
// request is left as it was.
func TestSecuritySignerRefusesAmbiguousImpersonation(t *testing.T) {
	t.Parallel()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s := newTestSigner(t, ec)
	for _, h := range []http.Header{
		{"Impersonate-Group": {"g1, g2"}},
		{"Impersonate-User": {"viewer", "kplug-admin"}},
		{"Impersonate-Extra-Scopes": {"read,write"}},
	} {
		req, _ := http.NewRequest(http.MethodGet, "https://cluster.example/api", nil)
		req.Header = h
		err := s.Sign(req)
		if err == nil || !strings.HasPrefix(err.Error(), "httpsig: the ") || !strings.HasSuffix(err.Error(), "; the request is not signed") {
			t.Errorf("%v: Sign returned %v", h, err)
		}
		if len(req.Header) != 1 {
			t.Errorf("%v: Sign changed the headers: %v", h, req.Header)
		}
	}
}
