package imagecred

import "testing"

func TestHelperRepository(t *testing.T) {
	for in, want := range map[string]string{
		"https://index.docker.io/v1/": "docker.io",
		"index.docker.io":             "docker.io",
		"registry.io:5000":            "registry.io:5000",
		"https://registry.io/v2/":     "registry.io",
		"http://registry.io/team/":    "registry.io/team",
	} {
		if got := helperRepository(in); got != want {
			t.Errorf("helperRepository(%q) = %q, want %q", in, got, want)
		}
	}
}
