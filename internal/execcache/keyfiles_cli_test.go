package execcache

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kplug/kplug/execcred/wire"
)

// TestKeyFollowsRealCLIs switches identity with the real gcloud and aws CLIs, where they are
// installed (the project does not install them; the test is skipped without them): each
// switch gives another key, and switching back gives the first one again. It checks that
// exec-cache reads the files these CLIs write, where they write them.
func TestKeyFollowsRealCLIs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gcloud and aws, which take seconds each")
	}
	t.Parallel()
	info := &wire.Info{APIVersion: wire.V1}
	const fresh = -1
	type step struct {
		argv []string
		same int // fresh for a key no earlier step had, or the step whose key it gives again
	}
	for _, tc := range []struct {
		name, cli, plugin string
		env               func(dir string) []string
		steps             []step
	}{
		{
			name: "gcloud", cli: "gcloud", plugin: "/usr/bin/gke-gcloud-auth-plugin",
			env: func(dir string) []string {
				return []string{"CLOUDSDK_CONFIG=" + filepath.Join(dir, "gcloud"), "CLOUDSDK_CORE_DISABLE_PROMPTS=1"}
			},
			steps: []step{
				{[]string{"gcloud", "config", "set", "account", "a@example.com"}, fresh},
				{[]string{"gcloud", "config", "set", "account", "b@example.com"}, fresh},
				{[]string{"gcloud", "config", "configurations", "create", "prod"}, fresh}, // and activates it
				{[]string{"gcloud", "config", "configurations", "activate", "default"}, 1},
			},
		},
		{
			name: "aws", cli: "aws", plugin: "/usr/bin/aws-iam-authenticator",
			env: func(dir string) []string {
				return []string{"AWS_CONFIG_FILE=" + filepath.Join(dir, "aws-config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "aws-credentials"), "AWS_PROFILE=prod"}
			},
			steps: []step{
				{[]string{"aws", "configure", "set", "aws_access_key_id", "AKIAEXAMPLE1"}, fresh},
				{[]string{"aws", "configure", "set", "aws_access_key_id", "AKIAEXAMPLE2"}, fresh},
				{[]string{"aws", "configure", "set", "role_arn", "arn:aws:iam::1:role/x"}, fresh},
				{[]string{"aws", "configure", "set", "aws_access_key_id", "AKIAEXAMPLE1"}, fresh}, // the role is still set
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.cli); err != nil {
				t.Skipf("%s is not installed", tc.cli)
			}
			t.Parallel()
			dir := t.TempDir()
			env := append(os.Environ(), tc.env(dir)...)
			var keys []string
			for _, s := range tc.steps {
				cmd := exec.Command(s.argv[0], s.argv[1:]...)
				cmd.Env = env
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%q: %v\n%s", s.argv, err, out)
				}
				key := Key(tc.plugin, []string{"token"}, env, info, KeyEnv{})
				switch {
				case s.same == fresh && slices.Contains(keys, key):
					t.Errorf("after %q: the key of an earlier step", s.argv)
				case s.same != fresh && key != keys[s.same]:
					t.Errorf("after %q: not the key of step %d", s.argv, s.same)
				}
				keys = append(keys, key)
			}
		})
	}
}
