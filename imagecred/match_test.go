package imagecred

import (
	"strings"
	"testing"
)

// matchCases are the kubelet's matching rules as its own tests and documentation state them.
var matchCases = []struct {
	glob, target string
	want         bool
	wantErr      bool
}{
	{glob: "registry.io", target: "registry.io/app", want: true},
	{glob: "registry.io", target: "registry.io", want: true},
	{glob: "*.registry.io", target: "a.registry.io/x", want: true},
	{glob: "*.registry.io", target: "a.b.registry.io/x"},         // one label per *
	{glob: "*.registry.io", target: "registry.io/x"},             // label count differs
	{glob: "*.io", target: "a.b.io"},                             // ditto
	{glob: "*", target: "localhost/x", want: true},               // single-label host
	{glob: "*", target: "docker.io/x"},                           // two labels
	{glob: "*.*", target: "docker.io/library/nginx", want: true}, // any two-label host
	{glob: "registry.io:5000", target: "registry.io:5000/a", want: true},
	{glob: "registry.io", target: "registry.io:5000/a"}, // ports must be equal
	{glob: "registry.io:5000", target: "registry.io/a"}, // in both directions
	{glob: "*.registry.io:5000", target: "a.registry.io:5000/x", want: true},
	{glob: "registry.io/foo", target: "registry.io/foobar", want: true}, // prefix, not segment
	{glob: "registry.io/foo", target: "registry.io/bar"},
	{glob: "registry.io/foo/", target: "registry.io/foo"},
	{glob: "Registry.io", target: "registry.io/x"},                    // case-sensitive
	{glob: "reg?stry.io", target: "registry.io/x"},                    // ? starts the URL query: host "reg"
	{glob: "r*y.io", target: "registry.io/x", want: true},             // * inside a label
	{glob: "r[d-f]gistry.io", target: "registry.io/x", wantErr: true}, // [ makes the host unparseable
	{glob: "user@registry.io", target: "registry.io/x", want: true},   // userinfo ignored
	{glob: "registry.io?x=1", target: "registry.io/x", want: true},    // query ignored
	{glob: "registry.io#frag", target: "registry.io/x", want: true},   // fragment ignored
	{glob: "", target: "registry.io/x"},                               // empty never matches
	{glob: "", target: "localhost/x"},
	{glob: "*.dkr.ecr.*.amazonaws.com", target: "123456789012.dkr.ecr.us-east-1.amazonaws.com/repo", want: true},
	{glob: "*.dkr.ecr.*.amazonaws.com", target: "123456789012.dkr.ecr.us-east-1.amazonaws.com.cn/repo"},
	{glob: "*.azurecr.*", target: "myreg.azurecr.io/app", want: true},
	{glob: "a[.io", target: "a[.io/x", wantErr: true}, // malformed class
	{glob: "%zz", target: "registry.io", wantErr: true},
}

func TestMatchImage(t *testing.T) {
	for _, tc := range matchCases {
		got, err := MatchImage(tc.glob, tc.target)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("MatchImage(%q, %q) = %v, %v; want %v, error %v", tc.glob, tc.target, got, err, tc.want, tc.wantErr)
		}
	}
}

// FuzzMatchImage checks that matching never panics, never matches with an error, and that
// a literal image matches itself. test/bench fuzzes it against the kubelet's own code.
func FuzzMatchImage(f *testing.F) {
	for _, tc := range matchCases {
		f.Add(tc.glob, tc.target)
	}
	f.Fuzz(func(t *testing.T, glob, target string) {
		ok, err := MatchImage(glob, target)
		if ok && err != nil {
			t.Fatalf("MatchImage(%q, %q) matched with error %v", glob, target, err)
		}
		if !strings.ContainsAny(target, `*?[\`) {
			if self, err := MatchImage(target, target); err == nil && !self {
				if _, perr := NormalizeImage(target); perr == nil {
					t.Fatalf("literal %q does not match itself", target)
				}
			}
		}
	})
}

func TestNormalizeImage(t *testing.T) {
	for in, want := range map[string]string{
		"nginx":      "docker.io/library/nginx",
		"nginx:1.25": "docker.io/library/nginx",
		"user/app":   "docker.io/user/app",
		"registry.io:5000/a/b@sha256:" + strings.Repeat("0", 64): "registry.io:5000/a/b",
		"registry.io/team/app:v1":                                "registry.io/team/app",
		"localhost/app":                                          "localhost/app",
	} {
		got, err := NormalizeImage(in)
		if err != nil || got != want {
			t.Errorf("NormalizeImage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := NormalizeImage("registry.io/App"); err == nil || !strings.HasPrefix(err.Error(), `imagecred: invalid image "registry.io/App": `) {
		t.Errorf("NormalizeImage of an invalid reference: %v", err)
	}
}

func TestIsDockerHub(t *testing.T) {
	for image, want := range map[string]bool{
		"docker.io/library/nginx": true, "index.docker.io/x/y": true, "nginx": true, "library/ubuntu": true,
		"registry.io/app": false, "localhost:5000/app": false, "/app": false, "": false,
		// As the kubelet decides for images of these registries (localhost/app falls back).
		"localhost/app": true, "registry:5000/app": false,
		// Bare registry hosts, as a docker credential helper is asked about.
		"docker.io": true, "index.docker.io": true, "localhost": true,
		"registry:5000": false, "registry.io": false, "localhost:5000": false, "[::1]:5000": false,
	} {
		if got := isDockerHub(image); got != want {
			t.Errorf("isDockerHub(%q) = %v, want %v", image, got, want)
		}
	}
}

func TestCacheKeyBytes(t *testing.T) {
	key, err := cacheKey("registry.io/image", "")
	if err != nil || key != "\x00\x11registry.io/image\x00\x00" {
		t.Errorf("cacheKey = %q, %v", key, err)
	}
	sa, err := serviceAccountKey("namespace", "service-account", "service-account-uid", nil, "")
	if err != nil || sa != "\x00\tnamespace\x00\x0fservice-account\x00\x13service-account-uid\x00\x00\x00\x00" {
		t.Errorf("serviceAccountKey = %q, %v", sa, err)
	}
	sa, err = serviceAccountKey("namespace", "service-account", "service-account-uid", map[string]string{"domain.io/annotation-1": "value1"}, hashToken("t"))
	want := "\x00\tnamespace\x00\x0fservice-account\x00\x13service-account-uid\x00\x00\x00\x01\x00\x16domain.io/annotation-1\x00\x06value1" +
		"\x00\x05token\x00\x47" + hashToken("t")
	if err != nil || sa != want {
		t.Errorf("serviceAccountKey with annotations and token = %q, %v", sa, err)
	}
	if _, err := cacheKey(strings.Repeat("x", 1<<16), ""); err == nil {
		t.Error("a 64 KiB component did not fail the key")
	}
}
