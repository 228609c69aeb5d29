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
	key := func(in input) string { return Key(in.path, in.args, in.env, &in.info, in.ignore) }
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
