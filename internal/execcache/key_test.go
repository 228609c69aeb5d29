package execcache

import (
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
		{"a variable ignored with --ignore-env", func(in *input) {
			in.env = append(in.env, "MY_SESSION=1", "CI_JOB_42=x")
			in.ignore = []string{"MY_SESSION", "CI_*"}
		}, true},
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
