package bench

import (
	"testing"

	"github.com/kplug/kplug/imagecred"
	"k8s.io/kubernetes/pkg/credentialprovider"
)

// matchSeeds are inputs where the rules are easy to get wrong.
var matchSeeds = [][2]string{
	{"*.registry.io", "a.registry.io/x"}, {"*.io", "a.b.io"}, {"*", "localhost/x"}, {"*.*", "docker.io/library/nginx"},
	{"registry.io:5000", "registry.io/a"}, {"registry.io", "registry.io:5000/a"}, {"registry.io/foo", "registry.io/foobar"},
	{"Registry.io", "registry.io"}, {"reg?stry.io", "registry.io"}, {"r[d-f]gistry.io", "registry.io"}, {"user@registry.io", "registry.io/x"},
	{"", "registry.io"}, {"a[.io", "a[.io"}, {"%zz", "x"}, {"[::1]:5000", "[::1]:5000/x"}, {"*.dkr.ecr.*.amazonaws.com", "1.dkr.ecr.us-east-1.amazonaws.com/r"},
}

// FuzzMatchImageAgainstKubelet checks that imagecred.MatchImage decides exactly as the
// kubelet's URLsMatchStr for any pattern and image.
func FuzzMatchImageAgainstKubelet(f *testing.F) {
	for _, s := range matchSeeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, glob, target string) {
		got, gotErr := imagecred.MatchImage(glob, target)
		want, wantErr := credentialprovider.URLsMatchStr(glob, target)
		if got != want || (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("MatchImage(%q, %q) = %v, %v; kubelet: %v, %v", glob, target, got, gotErr, want, wantErr)
		}
	})
}

// TestMatchSeedsAgreeWithKubelet runs the seeds without -fuzz, so that `go test` checks them.
func TestMatchSeedsAgreeWithKubelet(t *testing.T) {
	for _, s := range matchSeeds {
		got, gotErr := imagecred.MatchImage(s[0], s[1])
		want, wantErr := credentialprovider.URLsMatchStr(s[0], s[1])
		if got != want || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("MatchImage(%q, %q) = %v, %v; kubelet: %v, %v", s[0], s[1], got, gotErr, want, wantErr)
		}
	}
}
