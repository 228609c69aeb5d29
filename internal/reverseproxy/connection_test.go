package reverseproxy

import (
	"net/http"
	"testing"
)

func TestCheckConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"none", nil, ""},
		{"options", []string{"keep-alive", "Upgrade", "CLOSE, keep-alive ,, upgrade"}, ""},
		{"a field", []string{"keep-alive, Impersonate-User"}, `the Connection header names "Impersonate-User": only close, keep-alive and upgrade are accepted, because a proxy removes every field that Connection names before it forwards the request`},
		{"in a later line", []string{"close", "\tcontent-type "}, `the Connection header names "content-type": only close, keep-alive and upgrade are accepted, because a proxy removes every field that Connection names before it forwards the request`},
		{"a hop-by-hop field", []string{"TE"}, `the Connection header names "TE": only close, keep-alive and upgrade are accepted, because a proxy removes every field that Connection names before it forwards the request`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, l := range tc.lines {
				h.Add("Connection", l)
			}
			got := ""
			if err := CheckConnection(h); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("CheckConnection(%q) = %q, want %q", tc.lines, got, tc.want)
			}
		})
	}
}
