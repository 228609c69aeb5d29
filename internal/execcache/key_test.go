package execcache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplug/kplug/execcred/wire"
)

func TestKey(t *testing.T) {
	t.Parallel()
	cluster := func(mod func(*wire.Cluster)) *wire.Cluster {
		c := &wire.Cluster{Server: "https://k:6443", TLSServerName: "sni", CertificateAuthorityData: []byte("CA"), Config: []byte(`{"audience":"a"}`)}
		if mod != nil {
			mod(c)
		}
		return c
	}
	type input struct {
		path   string
		args   []string
		env    []string
		info   wire.Info
		ignore []string
	}
	base := input{
		path: "/usr/bin/aws-iam-authenticator",
		args: []string{"token", "-i", "prod"},
		env:  []string{"HOME=/home/u", "AWS_PROFILE=prod", "PWD=/home/u", "TERM=xterm"},
		info: wire.Info{APIVersion: wire.V1, Cluster: cluster(nil)},
	}
	key := func(in input) string { return Key(in.path, in.args, in.env, &in.info, KeyEnv{Ignore: in.ignore}) }
	baseKey := key(base)
	tests := []struct {
		name string
		mod  func(*input)
		same bool
	}{
		{"another command", func(in *input) { in.path = "/usr/local/bin/aws-iam-authenticator" }, false},
		{"other arguments", func(in *input) { in.args = []string{"token", "-i", "dev"} }, false},
		{"arguments split differently", func(in *input) { in.args = []string{"token", "-i prod"} }, false},
		{"another profile", func(in *input) { in.env = []string{"HOME=/home/u", "AWS_PROFILE=dev", "PWD=/home/u", "TERM=xterm"} }, false},
		{"a variable more", func(in *input) { in.env = append(in.env, "AWS_REGION=eu-west-1") }, false},
		{"another API version", func(in *input) { in.info.APIVersion = wire.V1beta1 }, false},
		{"another server", func(in *input) { in.info.Cluster = cluster(func(c *wire.Cluster) { c.Server = "https://k2:6443" }) }, false},
		{"another CA", func(in *input) {
			in.info.Cluster = cluster(func(c *wire.Cluster) { c.CertificateAuthorityData = []byte("CA2") })
		}, false},
		{"another TLS server name", func(in *input) { in.info.Cluster = cluster(func(c *wire.Cluster) { c.TLSServerName = "other" }) }, false},
		{"another cluster extension", func(in *input) {
			in.info.Cluster = cluster(func(c *wire.Cluster) { c.Config = []byte(`{"audience":"b"}`) })
		}, false},
		{"no cluster info", func(in *input) { in.info.Cluster = nil }, false},
		// An exec block that leaves variables out of the key never shares an entry with one
		// that does not (issue 27): its own AWS keys, ignored, would answer for the user's.
		{"an --ignore-env list", func(in *input) { in.ignore = []string{"AWS_PROFILE"} }, false},
		{"environment order", func(in *input) { in.env = []string{"TERM=xterm", "PWD=/home/u", "AWS_PROFILE=prod", "HOME=/home/u"} }, true},
		{"a duplicate overridden by the last value", func(in *input) { in.env = append([]string{"AWS_PROFILE=dev"}, in.env...) }, true},
		{"shell and terminal variables", func(in *input) {
			in.env = []string{"HOME=/home/u", "AWS_PROFILE=prod", "PWD=/tmp", "OLDPWD=/home/u", "TERM=screen", "_=/usr/bin/helm", "SHLVL=3", "TMUX_PANE=%3", "ITERM_SESSION_ID=w0t1", "SSH_TTY=/dev/pts/4"}
		}, true},
		{"KUBERNETES_EXEC_INFO itself", func(in *input) { in.env = append(in.env, wire.InfoEnv+`={"anything":1}`) }, true},
		{"interactive", func(in *input) { in.info.Interactive = true }, true},
		{"a v1alpha1 response", func(in *input) { in.info.Response = &wire.Response{Code: 401} }, true},
	}
	for _, tt := range tests {
		in := base
		in.env = append([]string(nil), base.env...)
		tt.mod(&in)
		if got := key(in) == baseKey; got != tt.same {
			t.Errorf("%s: same key %v, want %v", tt.name, got, tt.same)
		}
	}
	if len(baseKey) != 64 {
		t.Errorf("key %q, want a hex SHA-256", baseKey)
	}
	// With the same --ignore-env, ignored variables do not change the key.
	ignoring := base
	ignoring.ignore = []string{"MY_SESSION", "CI_*"}
	more := ignoring
	more.env = append(append([]string(nil), base.env...), "MY_SESSION=1", "CI_JOB_42=x")
	if key(ignoring) != key(more) {
		t.Error("a variable ignored with --ignore-env changed the key")
	}
}

// TestKeyIdentity: for the plugins exec-cache knows, and with --key-env, the key holds the
// variables that choose whose credential the plugin returns, so the same person's terminal
// and desktop share an entry while any identity switch gives another.
func TestKeyIdentity(t *testing.T) {
	t.Parallel()
	info := &wire.Info{APIVersion: wire.V1}
	// What differs between a terminal and a desktop session of one user.
	terminal := []string{"HOME=/home/u", "USER=u", "PATH=/home/u/bin:/usr/bin", "SHELL=/bin/zsh", "LANG=en_GB.UTF-8",
		"TERM=xterm-256color", "PWD=/home/u/src", "EDITOR=vim", "HISTFILE=/home/u/.zsh_history", "SSH_AUTH_SOCK=/run/ssh"}
	desktop := []string{"HOME=/home/u", "USER=u", "PATH=/usr/local/bin:/usr/bin", "LANG=en_US.UTF-8", "DESKTOP_SESSION=gnome",
		"XDG_CURRENT_DESKTOP=GNOME", "SESSION_MANAGER=local/host:@/tmp/.ICE-unix/1", "GIO_LAUNCHED_DESKTOP_FILE=/usr/share/applications/code.desktop",
		"ELECTRON_RUN_AS_NODE=1", "VSCODE_PID=4242", "MANAGERPID=1000"}
	with := func(env []string, more ...string) []string { return append(append([]string(nil), env...), more...) }
	tests := []struct {
		name    string
		path    string
		a, b    []string
		declare []string
		same    bool
	}{
		{"aws: terminal and desktop", "/usr/bin/aws-iam-authenticator", with(terminal, "AWS_PROFILE=prod"), with(desktop, "AWS_PROFILE=prod"), nil, true},
		{"aws: another AWS_PROFILE", "/usr/bin/aws-iam-authenticator", with(terminal, "AWS_PROFILE=prod"), with(desktop, "AWS_PROFILE=dev"), nil, false},
		{"aws: a profile set or not", "/usr/bin/aws-iam-authenticator", terminal, with(desktop, "AWS_PROFILE=prod"), nil, false},
		{"aws: another access key", "/usr/bin/aws-iam-authenticator", with(terminal, "AWS_ACCESS_KEY_ID=AKIA1", "AWS_SECRET_ACCESS_KEY=s"),
			with(desktop, "AWS_ACCESS_KEY_ID=AKIA2", "AWS_SECRET_ACCESS_KEY=s"), nil, false},
		{"aws: another role", "/usr/local/bin/aws", with(terminal, "AWS_ROLE_ARN=arn:a"), with(desktop, "AWS_ROLE_ARN=arn:b"), nil, false},
		{"aws: another cluster id", "/usr/bin/aws-iam-authenticator", with(terminal, "KUBERNETES_AWS_AUTHENTICATOR_CLUSTER_ID=a"),
			with(desktop, "KUBERNETES_AWS_AUTHENTICATOR_CLUSTER_ID=b"), nil, false},
		{"aws: another default role", "/usr/bin/aws-iam-authenticator", with(terminal, "DEFAULT_ROLE=a"), with(desktop, "DEFAULT_ROLE=b"), nil, false},
		{"azure: another Terraform client", "/usr/bin/kubelogin", with(terminal, "ARM_CLIENT_ID=1"), with(desktop, "ARM_CLIENT_ID=2"), nil, false},
		{"aws: another home", "/usr/bin/aws-iam-authenticator", terminal, with(desktop, "HOME=/home/v"), nil, false},
		{"gcloud: terminal and desktop", "/usr/bin/gke-gcloud-auth-plugin", with(terminal, "CLOUDSDK_CONFIG=/c"), with(desktop, "CLOUDSDK_CONFIG=/c"), nil, true},
		{"gcloud: another CLOUDSDK_CONFIG", "/usr/bin/gke-gcloud-auth-plugin", with(terminal, "CLOUDSDK_CONFIG=/c"), with(desktop, "CLOUDSDK_CONFIG=/d"), nil, false},
		{"gcloud: another account", "/usr/bin/gke-gcloud-auth-plugin", with(terminal, "CLOUDSDK_CORE_ACCOUNT=a@x"), with(desktop, "CLOUDSDK_CORE_ACCOUNT=b@x"), nil, false},
		{"azure: terminal and desktop", "/usr/bin/kubelogin", with(terminal, "AZURE_CONFIG_DIR=/a"), with(desktop, "AZURE_CONFIG_DIR=/a"), nil, true},
		{"azure: another client", "/usr/bin/kubelogin", with(terminal, "AZURE_CLIENT_ID=1"), with(desktop, "AZURE_CLIENT_ID=2"), nil, false},
		{"azure: another token cache", "/usr/bin/kubelogin", with(terminal, "KUBECACHEDIR=/a"), with(desktop, "KUBECACHEDIR=/b"), nil, false},
		// Regression: kubelogin's workload identity in GitHub Actions takes its federated
		// token from the job's ACTIONS_ID_TOKEN_REQUEST_URL and _TOKEN, so another job (whose
		// repository the client ID may not trust) must not be served this job's token.
		{"azure: another GitHub Actions job", "/usr/bin/kubelogin", with(terminal, "ACTIONS_ID_TOKEN_REQUEST_URL=https://a/1"),
			with(desktop, "ACTIONS_ID_TOKEN_REQUEST_URL=https://a/2"), nil, false},
		{"oidc-login: terminal and desktop", "/home/u/bin/kubectl-oidc_login", terminal, desktop, nil, true},
		{"unknown plugin: the whole environment", "/opt/corp/login", terminal, desktop, nil, false},
		{"unknown plugin, declared: terminal and desktop", "/opt/corp/login", with(terminal, "CORP_USER=u"), with(desktop, "CORP_USER=u"), []string{"CORP_*"}, true},
		{"unknown plugin, declared: another user", "/opt/corp/login", with(terminal, "CORP_USER=u"), with(desktop, "CORP_USER=v"), []string{"CORP_*"}, false},
		{"known plugin, declared too", "/usr/bin/aws-iam-authenticator", with(terminal, "TEAM=a"), with(desktop, "TEAM=b"), []string{"TEAM"}, false},
		{"known plugin, undeclared variable", "/usr/bin/aws-iam-authenticator", with(terminal, "TEAM=a"), with(desktop, "TEAM=b"), nil, true},
	}
	for _, tt := range tests {
		sel := KeyEnv{Declare: tt.declare}
		a, b := Key(tt.path, []string{"token"}, tt.a, info, sel), Key(tt.path, []string{"token"}, tt.b, info, sel)
		if (a == b) != tt.same {
			t.Errorf("%s: same key %v, want %v", tt.name, a == b, tt.same)
		}
	}
	// A rule is part of the key: declaring variables for a plugin gives other entries
	// than keying on its whole environment, even if the two select the same variables.
	env := []string{"CORP_USER=u"}
	if Key("/opt/corp/login", nil, env, info, KeyEnv{}) == Key("/opt/corp/login", nil, env, info, KeyEnv{Declare: []string{"CORP_USER"}}) {
		t.Error("keying on the environment and on declared variables gave the same key")
	}
}

// TestKeyIdentityFiles: for the plugins exec-cache knows, switching identity through a
// file (`gcloud config set account`, `gcloud config configurations activate`, `az account
// set`, an edit of ~/.aws/config or ~/.aws/credentials under the same AWS_PROFILE) gives
// another key, while a terminal and a desktop of one user, reading the same files, still
// share one. The files are written as the CLIs write them (gcloud's checked against Google
// Cloud SDK 528: TestKeyFollowsRealCLIs).
func TestKeyIdentityFiles(t *testing.T) {
	t.Parallel()
	info := &wire.Info{APIVersion: wire.V1}
	type step struct {
		name string
		do   func(t *testing.T, home string) // changes files under home
		same bool                            // the key stays the same
	}
	tests := []struct {
		plugin string
		env    func(home string) []string
		setup  func(t *testing.T, home string)
		steps  []step
	}{
		{
			plugin: "/usr/bin/aws-iam-authenticator",
			env:    func(home string) []string { return []string{"HOME=" + home, "AWS_PROFILE=prod"} },
			setup: func(t *testing.T, home string) {
				writeIn(t, home, ".aws/config", "[profile prod]\nrole_arn = arn:aws:iam::1:role/admin\nsource_profile = base\n")
				writeIn(t, home, ".aws/credentials", "[base]\naws_access_key_id = AKIA1\naws_secret_access_key = s1\n")
			},
			steps: []step{
				{"the profile's role edited", func(t *testing.T, home string) {
					writeIn(t, home, ".aws/config", "[profile prod]\nrole_arn = arn:aws:iam::1:role/viewer\nsource_profile = base\n")
				}, false},
				{"the source profile's keys replaced", func(t *testing.T, home string) {
					writeIn(t, home, ".aws/credentials", "[base]\naws_access_key_id = AKIA2\naws_secret_access_key = s2\n")
				}, false},
				{"the file rewritten unchanged", func(t *testing.T, home string) {
					writeIn(t, home, ".aws/credentials", "[base]\naws_access_key_id = AKIA2\naws_secret_access_key = s2\n")
				}, true},
				{"credentials removed", func(t *testing.T, home string) { removeIn(t, home, ".aws/credentials") }, false},
				{"credentials back, empty", func(t *testing.T, home string) { writeIn(t, home, ".aws/credentials", "") }, false},
			},
		},
		{
			plugin: "/usr/local/bin/aws",
			env: func(home string) []string {
				return []string{"HOME=" + home, "AWS_CONFIG_FILE=~/work/aws-config", "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "work", "aws-creds")}
			},
			setup: func(t *testing.T, home string) {
				writeIn(t, home, "work/aws-config", "[default]\nregion = eu-west-1\n")
				writeIn(t, home, "work/aws-creds", "[default]\naws_access_key_id = AKIA1\n")
			},
			steps: []step{
				{"~/.aws/config edited, which AWS_CONFIG_FILE overrides", func(t *testing.T, home string) {
					writeIn(t, home, ".aws/config", "[default]\nregion = us-east-1\n")
				}, true},
				{"$AWS_CONFIG_FILE (with ~) edited", func(t *testing.T, home string) {
					writeIn(t, home, "work/aws-config", "[default]\nrole_arn = arn:aws:iam::1:role/x\n")
				}, false},
				{"$AWS_SHARED_CREDENTIALS_FILE edited", func(t *testing.T, home string) {
					writeIn(t, home, "work/aws-creds", "[default]\naws_access_key_id = AKIA2\n")
				}, false},
			},
		},
		{
			plugin: "/usr/lib/google-cloud-sdk/bin/gke-gcloud-auth-plugin",
			env:    func(home string) []string { return []string{"HOME=" + home} },
			setup: func(t *testing.T, home string) {
				writeIn(t, home, ".config/gcloud/active_config", "default")
				writeIn(t, home, ".config/gcloud/configurations/config_default", "[core]\naccount = a@example.com\n")
				writeIn(t, home, ".config/gcloud/configurations/config_prod", "[core]\naccount = p@example.com\n")
			},
			steps: []step{
				{"gcloud config set account", func(t *testing.T, home string) {
					writeIn(t, home, ".config/gcloud/configurations/config_default", "[core]\naccount = b@example.com\n")
				}, false},
				{"gcloud config configurations activate prod", func(t *testing.T, home string) {
					writeIn(t, home, ".config/gcloud/active_config", "prod")
				}, false},
				{"an inactive configuration edited", func(t *testing.T, home string) {
					writeIn(t, home, ".config/gcloud/configurations/config_default", "[core]\naccount = c@example.com\n")
				}, true},
				{"gcloud's own token databases written", func(t *testing.T, home string) {
					writeIn(t, home, ".config/gcloud/access_tokens.db", "tokens")
					writeIn(t, home, ".config/gcloud/credentials.db", "refresh tokens")
				}, true},
				{"gcloud auth application-default login", func(t *testing.T, home string) {
					writeIn(t, home, ".config/gcloud/application_default_credentials.json", `{"type":"authorized_user","refresh_token":"r"}`)
				}, false},
				{"an invalid active_config (gcloud uses default)", func(t *testing.T, home string) {
					writeIn(t, home, ".config/gcloud/active_config", "../../etc/x")
				}, false},
				{"active_config removed: default still", func(t *testing.T, home string) { removeIn(t, home, ".config/gcloud/active_config") }, true},
			},
		},
		{
			plugin: "/usr/bin/gcloud",
			env: func(home string) []string {
				return []string{"HOME=" + home, "CLOUDSDK_CONFIG=" + filepath.Join(home, "gc"), "CLOUDSDK_ACTIVE_CONFIG_NAME=ci"}
			},
			setup: func(t *testing.T, home string) {
				writeIn(t, home, "gc/configurations/config_ci", "[core]\naccount = ci@example.com\n")
			},
			steps: []step{
				{"active_config edited, which CLOUDSDK_ACTIVE_CONFIG_NAME overrides", func(t *testing.T, home string) {
					writeIn(t, home, "gc/active_config", "other")
				}, true},
				{"~/.config/gcloud's configuration edited, which CLOUDSDK_CONFIG overrides", func(t *testing.T, home string) {
					writeIn(t, home, ".config/gcloud/configurations/config_ci", "[core]\naccount = x@example.com\n")
				}, true},
				{"the account set in $CLOUDSDK_CONFIG", func(t *testing.T, home string) {
					writeIn(t, home, "gc/configurations/config_ci", "[core]\naccount = ci2@example.com\n")
				}, false},
			},
		},
		{
			plugin: "/usr/bin/kubelogin",
			env:    func(home string) []string { return []string{"HOME=" + home} },
			setup: func(t *testing.T, home string) {
				writeIn(t, home, ".azure/azureProfile.json", `{"subscriptions":[{"id":"s1","isDefault":true,"user":{"name":"a@x"}},{"id":"s2","isDefault":false,"user":{"name":"b@x"}}]}`)
			},
			steps: []step{
				{"az account set", func(t *testing.T, home string) {
					writeIn(t, home, ".azure/azureProfile.json", `{"subscriptions":[{"id":"s1","isDefault":false,"user":{"name":"a@x"}},{"id":"s2","isDefault":true,"user":{"name":"b@x"}}]}`)
				}, false},
				{"az cloud set", func(t *testing.T, home string) {
					writeIn(t, home, ".azure/config", "[cloud]\nname = AzureChinaCloud\n")
				}, false},
				{"kubelogin's own token cache written", func(t *testing.T, home string) {
					writeIn(t, home, ".kube/cache/kubelogin/auth.json", `{"username":"a@x"}`)
				}, true},
				{"azd auth login", func(t *testing.T, home string) {
					writeIn(t, home, ".azd/auth.json", `{"auth":{"account":{"currentUser":{"homeAccountId":"h2"}}}}`)
				}, false},
			},
		},
		{
			plugin: "/home/u/bin/kubectl-oidc_login", // issuer and client are arguments
			env:    func(home string) []string { return []string{"HOME=" + home} },
			setup:  func(*testing.T, string) {},
			steps: []step{
				{"its token cache written", func(t *testing.T, home string) { writeIn(t, home, ".kube/cache/oidc-login/abc", `{"id_token":"x"}`) }, true},
				{"another plugin's configuration", func(t *testing.T, home string) { writeIn(t, home, ".aws/config", "[default]\n") }, true},
			},
		},
		{
			plugin: "/opt/corp/login", // unknown: the whole environment, no files
			env:    func(home string) []string { return []string{"HOME=" + home} },
			setup:  func(*testing.T, string) {},
			steps: []step{
				{"a known plugin's configuration", func(t *testing.T, home string) { writeIn(t, home, ".aws/config", "[default]\n") }, true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.plugin), func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			tt.setup(t, home)
			// A terminal and a desktop of the same user, reading the same files.
			terminal := append(tt.env(home), "TERM=xterm", "PWD=/src", "SHELL=/bin/zsh")
			desktop := append(tt.env(home), "XDG_CURRENT_DESKTOP=GNOME", "VSCODE_PID=1")
			key := func(env []string) string { return Key(tt.plugin, []string{"get-token"}, env, info, KeyEnv{}) }
			before := key(terminal)
			known := identityOf(tt.plugin) != nil
			if got := key(desktop); (got == before) != known {
				t.Fatalf("terminal and desktop: same key %v, want %v", got == before, known)
			}
			for _, s := range tt.steps {
				s.do(t, home)
				after := key(terminal)
				if (after == before) != s.same {
					t.Errorf("%s: same key %v, want %v", s.name, after == before, s.same)
				}
				if known && key(desktop) != after {
					t.Errorf("%s: the terminal and the desktop no longer share a key", s.name)
				}
				before = after
			}
		})
	}
}

// TestKeyIdentityFileLimits: an identity file is read without blocking and within bounds,
// whatever it is: a link is followed (to a dotfiles repository) but only to a regular
// file, a FIFO or a device counts as such without being read, and a huge file counts by
// its first maxIdentityFile bytes and its size.
func TestKeyIdentityFileLimits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	regular := filepath.Join(dir, "config")
	writeIn(t, dir, "config", "[default]\n")
	if got, want := fileDigest(regular), "4f6d719ab4ce4637e9ff1e09b20153a332f99ff0cb61ee694169258759e23b32"; got != want { // sha256sum of the file
		t.Errorf("a regular file: digest %q, want %q", got, want)
	}
	linked := filepath.Join(dir, "linked")
	if err := os.Symlink(regular, linked); err != nil {
		t.Fatal(err)
	}
	if fileDigest(linked) != fileDigest(regular) {
		t.Error("a link to the file does not count as the file")
	}
	if got := fileDigest(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("a missing file: %q, want the empty digest", got)
	}
	writeIn(t, dir, "empty", "")
	if got := fileDigest(filepath.Join(dir, "empty")); got == "" {
		t.Error("an empty file counts as a missing one")
	}
	if got := fileDigest(dir); got != digestNotRegular {
		t.Errorf("a directory: %q", got)
	}
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxIdentityFile + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	first := fileDigest(big)
	if err := os.Truncate(big, maxIdentityFile+2); err != nil {
		t.Fatal(err)
	}
	if first == "" || first == digestUnreadable || fileDigest(big) == first {
		t.Errorf("a file over the limit: %q, then %q after it grew", first, fileDigest(big))
	}
	testIdentityFileSpecial(t, dir)
}

func writeIn(t *testing.T, dir, name, content string) {
	t.Helper()
	path := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func removeIn(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, filepath.FromSlash(name))); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkKey is the key's cost on every call: for an unknown plugin (the environment
// only), and for known plugins whose identity files exist, as on a configured desktop
// (each read and hashed on every call).
func BenchmarkKey(b *testing.B) {
	home := b.TempDir()
	profile := `{"subscriptions":[` + strings.Repeat(`{"id":"00000000-0000-0000-0000-000000000000","name":"subscription","state":"Enabled","user":{"name":"someone@example.com","type":"user"},"isDefault":false,"tenantId":"00000000-0000-0000-0000-000000000000","environmentName":"AzureCloud"},`, 20) + `{}]}`
	for name, content := range map[string]string{
		".aws/config":                                  strings.Repeat("[profile p]\nrole_arn = arn:aws:iam::123456789012:role/admin\nsource_profile = base\nregion = eu-west-1\n\n", 10),
		".aws/credentials":                             "[base]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = secret\n",
		".config/gcloud/active_config":                 "default",
		".config/gcloud/configurations/config_default": "[core]\naccount = someone@example.com\nproject = p\n",
		".azure/azureProfile.json":                     profile,
		".azure/config":                                "[cloud]\nname = AzureCloud\n",
	} {
		path := filepath.Join(home, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	env := append(os.Environ(), "HOME="+home, "AWS_PROFILE=p")
	info := &wire.Info{APIVersion: wire.V1}
	for _, plugin := range []string{"/opt/corp/login", "/usr/bin/aws-iam-authenticator", "/usr/bin/gke-gcloud-auth-plugin", "/usr/bin/kubelogin"} {
		b.Run(filepath.Base(plugin), func(b *testing.B) {
			for b.Loop() {
				Key(plugin, []string{"token"}, env, info, KeyEnv{})
			}
		})
	}
}
