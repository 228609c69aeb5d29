package kuberc

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDecode pins what some fixtures decode to; test/bench checks every fixture against
// kubectl's own decoder.
func TestDecode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file    string
		want    *Preference
		wantErr string
	}{
		{"allowlist.yaml", &Preference{APIVersion: V1beta1, Document: 1, Policy: Policy{Type: Allowlist, Allowlist: entries("kplug", "/usr/local/bin/aws-iam-authenticator")}}, ""},
		{"name-deprecated.yaml", &Preference{APIVersion: V1beta1, Document: 1, Policy: Policy{Type: Allowlist, Allowlist: entries("kplug", "gke-gcloud-auth-plugin")}}, ""},
		{"allowlist-empty.yaml", &Preference{APIVersion: V1beta1, Document: 1, Policy: Policy{Type: Allowlist, Allowlist: entries()}}, ""},
		{"allowlist-null.yaml", &Preference{APIVersion: V1beta1, Document: 1, Policy: Policy{Type: Allowlist}}, ""},
		{"v1alpha1-with-policy.yaml", &Preference{APIVersion: V1alpha1, Document: 1, Ignored: []string{`unknown field "credentialPluginPolicy"`}}, ""},
		{"multi-first-usable.yaml", &Preference{APIVersion: V1beta1, Document: 2, Policy: Policy{Type: DenyAll}}, ""},
		{"multi-v1alpha1-first.yaml", &Preference{APIVersion: V1alpha1, Document: 1}, ""},
		{"multi-skips-broken.yaml", &Preference{APIVersion: V1beta1, Document: 3, Policy: Policy{Type: DenyAll}}, ""},
		{"crlf.yaml", &Preference{APIVersion: V1beta1, Document: 1, Policy: Policy{Type: DenyAll}}, ""},
		{"json.yaml", &Preference{APIVersion: V1beta1, Document: 1, Policy: Policy{Type: Allowlist, Allowlist: entries("kplug")}}, ""},
		{"policy-wrong-case.yaml", &Preference{APIVersion: V1beta1, Document: 1, Ignored: []string{`unknown field "CredentialPluginPolicy"`}}, ""},
		{"empty.yaml", nil, ""},
		{"name-conflict.yaml", nil, "no valid preferences found: document 1: credentialPluginAllowlist entry #2: both `Name` and `Command` were supplied with different values. `Name` is deprecated, use `Command` instead"},
		{"no-kind.yaml", nil, "no valid preferences found: document 1: no kind"},
		{"comments-only.yaml", nil, "no valid preferences found: document 1: no kind"},
		{"scalar.yaml", nil, "no valid preferences found: document 1: not a mapping but string"},
		{"wrong-group.yaml", nil, `no valid preferences found: document 1: kind "Preference" of apiVersion "kubectl.config.k8s.io/v1" is not a Preference of kubectl.config.k8s.io/v1beta1 or kubectl.config.k8s.io/v1alpha1`},
		{"bad-separator.yaml", nil, "invalid Yaml document separator: !!map"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Decode([]byte(fixture(t, tt.file)))
			if msg(err) != tt.wantErr {
				t.Fatalf("Decode: %v\nwant error %q", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decode (-want +got):\n%s", diff)
			}
		})
	}
}

// Decode never panics, and what it returns is consistent.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"allowlist.yaml", "multi-skips-broken.yaml", "crlf.yaml", "json.yaml", "duplicate-key.yaml"} {
		b, err := readFixture(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pref, err := Decode(data)
		switch {
		case err != nil && pref != nil:
			t.Fatalf("both a Preference and an error: %v", err)
		case pref != nil && (pref.Document < 1 || pref.APIVersion != V1beta1 && pref.APIVersion != V1alpha1):
			t.Fatalf("Preference %+v", pref)
		case pref != nil && pref.APIVersion == V1alpha1 && (pref.Policy.Type != "" || pref.Policy.Allowlist != nil):
			t.Fatalf("a v1alpha1 document with a policy: %+v", pref)
		case err != nil && !strings.Contains(err.Error(), "no valid preferences found") && !strings.Contains(err.Error(), "separator"):
			t.Fatalf("unexpected error %v", err)
		}
	})
}
