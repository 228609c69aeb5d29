package kuberc

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLocate(t *testing.T) {
	t.Parallel()
	home := filepath.Join("/home", "me")
	def := filepath.Join(home, ".kube", "kuberc")
	tests := []struct {
		name         string
		o            Options
		want         string
		wantExplicit bool
		wantErr      string
	}{
		{"default", Options{Home: home}, def, false, ""},
		{"KUBERC", Options{Env: "/etc/kuberc", Home: home}, "/etc/kuberc", true, ""},
		{"flag", Options{Path: "/f", Home: home}, "/f", true, ""},
		{"flag wins over KUBERC", Options{Path: "/f", Env: "/etc/kuberc", Home: home}, "/f", true, ""},
		// kubectl's own quirk: a flag naming the default file gives way to KUBERC.
		{"flag naming the default file", Options{Path: def, Env: "/etc/kuberc", Home: home}, "/etc/kuberc", true, ""},
		{"flag naming the default file, no KUBERC", Options{Path: def, Home: home}, def, true, ""},
		{"KUBERC=off", Options{Env: "off", Home: home}, "", false, ""},
		{"KUBERC=off and a flag", Options{Env: "off", Path: "/f", Home: home}, "", false, "kuberc: disabling kuberc via KUBERC=off and passing kuberc flag are mutually exclusive"},
		{"KUBERC=OFF is a file", Options{Env: "OFF", Home: home}, "OFF", true, ""},
		{"KUBECTL_KUBERC=false", Options{Disabled: true, Env: "/etc/kuberc", Home: home}, "", false, ""},
		{"KUBECTL_KUBERC=false and a flag", Options{Disabled: true, Path: "/f", Home: home}, "", false, "kuberc: KUBECTL_KUBERC=false turns kuberc off, so no kuberc file can be given"},
		{"no home", Options{}, filepath.Join(".kube", "kuberc"), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, explicit, err := Locate(tt.o)
			if got != tt.want || explicit != tt.wantExplicit || msg(err) != tt.wantErr {
				t.Fatalf("Locate = %q, %v, %v; want %q, %v, %q", got, explicit, err, tt.want, tt.wantExplicit, tt.wantErr)
			}
		})
	}
}

func TestHomeDir(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("the Windows rules need Windows paths")
	}
	env := map[string]string{"HOME": "/home/me", "USERPROFILE": "/ignored"}
	if got := HomeDir(func(k string) string { return env[k] }); got != "/home/me" {
		t.Fatalf("HomeDir = %q", got)
	}
}

func msg(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// writeKuberc writes data as dir's default kuberc.
func writeKuberc(t *testing.T, home, data string) string {
	t.Helper()
	path := DefaultPath(home)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := readFixture(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readFixture(name string) ([]byte, error) { return os.ReadFile(filepath.Join("testdata", name)) }

func TestLoad(t *testing.T) {
	t.Parallel()
	denyAll := Policy{Type: DenyAll}
	tests := []struct {
		name string
		// file is written as the default kuberc unless empty; explicit names it with
		// Options.Path.
		file         string
		explicit     bool
		want         Policy
		wantWarnings []string // substrings, one per warning
		wantErr      string   // substring
	}{
		{name: "no default file: no kuberc, allow all"},
		{name: "missing explicit file", explicit: true, wantErr: "kuberc: open "},
		{name: "default file", file: fixture(t, "denyall.yaml"), want: denyAll},
		{name: "explicit file", file: fixture(t, "denyall.yaml"), explicit: true, want: denyAll},
		{name: "empty default file", file: ""},
		{name: "empty explicit file", file: "\n", explicit: true},
		{name: "unusable default file: a warning, and no policy", file: "kind: [", wantWarnings: []string{"kuberc: no preferences loaded from "}},
		{name: "unusable explicit file", file: "kind: [", explicit: true, wantErr: "no valid preferences found: document 1: "},
		{name: "bad separator in the default file", file: fixture(t, "bad-separator.yaml"), wantWarnings: []string{"invalid Yaml document separator: !!map"}},
		{name: "name and command differ, explicit", file: fixture(t, "name-conflict.yaml"), explicit: true, wantErr: "credentialPluginAllowlist entry #2: both `Name` and `Command` were supplied with different values"},
		// kubectl then runs every plugin, and only warns: so do we, for parity.
		{name: "name and command differ, default", file: fixture(t, "name-conflict.yaml"), wantWarnings: []string{"entry #2: both `Name` and `Command`"}},
		{name: "misspelt policy field: a warning, allow all", file: fixture(t, "policy-misspelt.yaml"), explicit: true, wantWarnings: []string{`unknown field "credentialPluginPolicyy"`}},
		{name: "invalid policy", file: fixture(t, "allowlist-empty.yaml"), wantErr: `invalid plugin policy: credential plugin policy set to "Allowlist", but allowlist is empty; use "DenyAll" policy instead`},
		// kubernetes/kubernetes#142564: as kubectl kuberc set before 1.38 left it, after
		// --policy Allowlist then --policy AllowAll. Still invalid; the message says why.
		{name: "leftover allowlist", file: fixture(t, "allowall-leftover-allowlist.yaml"), wantErr: `invalid plugin policy: misconfigured credential plugin allowlist: plugin policy is "AllowAll" but allowlist is non-nil; ` +
			`credentialPluginAllowlist ["cloud-credential-helper"] is left over beside credentialPluginPolicy: AllowAll (kubectl kuberc set before 1.38 keeps the list when it changes the policy): delete the list, or set credentialPluginPolicy: Allowlist to use it`},
		{
			name: "misspelt allowlist: invalid, and the warning says why", file: fixture(t, "allowlist-misspelt.yaml"), explicit: true,
			wantWarnings: []string{`unknown field "credentialPluginAllowList"`}, wantErr: "allowlist is unspecified",
		},
		{name: "deprecated name", file: fixture(t, "name-deprecated.yaml"), want: Policy{Type: Allowlist, Allowlist: []AllowlistEntry{{"kplug"}, {"gke-gcloud-auth-plugin"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			o := Options{Home: home}
			path := DefaultPath(home)
			if tt.file != "" || strings.HasPrefix(tt.name, "empty") {
				path = writeKuberc(t, home, tt.file)
			}
			if tt.explicit {
				o.Path = path
			}
			l, err := Load(o)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && !strings.Contains(msg(err), tt.wantErr) {
				t.Fatalf("Load: %v, want an error with %q", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), path) {
				t.Errorf("the error does not name the file: %v", err)
			}
			var invalid *InvalidPolicyError
			if errors.As(err, &invalid) || err == nil {
				if diff := cmp.Diff(tt.want, l.Policy()); err == nil && diff != "" {
					t.Errorf("policy (-want +got):\n%s", diff)
				}
				if len(l.Warnings) != len(tt.wantWarnings) {
					t.Fatalf("warnings %q, want %q", l.Warnings, tt.wantWarnings)
				}
				for i, w := range tt.wantWarnings {
					if !strings.Contains(l.Warnings[i], w) || !strings.Contains(l.Warnings[i], path) {
						t.Errorf("warning %q, want %q and the file", l.Warnings[i], w)
					}
				}
			}
		})
	}
}

// KUBERC names the file when there is no flag; KUBERC=off turns a present default file off.
func TestLoadEnv(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeKuberc(t, home, fixture(t, "denyall.yaml"))
	other := filepath.Join(t.TempDir(), "kuberc")
	if err := os.WriteFile(other, []byte(fixture(t, "allowlist.yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Load(Options{Home: home, Env: other})
	if err != nil || l.Path != other || l.Policy().Type != Allowlist {
		t.Fatalf("KUBERC: %+v, %v", l, err)
	}
	l, err = Load(Options{Home: home, Env: "off"})
	if err != nil || l.Path != "" || l.Preference != nil || l.Policy().Type != "" {
		t.Fatalf("KUBERC=off: %+v, %v", l, err)
	}
	if _, err := Load(Options{Home: home, Env: "off", Path: other}); err == nil {
		t.Fatal("KUBERC=off with an explicit file: no error")
	}
}
