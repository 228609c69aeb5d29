package imagecred

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1 "k8s.io/kubelet/config/v1"
)

const v1Config = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: ecr-credential-provider
  matchImages: ["*.dkr.ecr.*.amazonaws.com"]
  defaultCacheDuration: 12h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: [get-credentials]
  env:
  - name: HOME
    value: /root
  tokenAttributes:
    serviceAccountTokenAudience: sts.amazonaws.com
    cacheType: ServiceAccount
    requireServiceAccount: false
    optionalServiceAccountAnnotationKeys: [eks.amazonaws.com/ecr-role-arn]
`

const v1alpha1JSON = `{"apiVersion":"kubelet.config.k8s.io/v1alpha1","kind":"CredentialProviderConfig",
"providers":[{"name":"alpha","matchImages":["registry.io"],"defaultCacheDuration":"1m","apiVersion":"credentialprovider.kubelet.k8s.io/v1alpha1"}]}`

const v1beta1Config = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: CredentialProviderConfig
providers:
- name: beta
  matchImages: [registry.io]
  defaultCacheDuration: 0s
  apiVersion: credentialprovider.kubelet.k8s.io/v1beta1
  env: [{name: A, value: b}]
`

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// kubeletHash computes the hash the way the kubelet documents it, independently of LoadConfig.
func kubeletHash(contents ...string) string {
	h := sha256.New()
	for _, c := range contents {
		_ = binary.Write(h, binary.BigEndian, uint64(len(c)))
		h.Write([]byte(c))
	}
	return fmt.Sprintf("sha256:%x", h.Sum(nil))
}

func TestLoadConfigFile(t *testing.T) {
	dir := writeFiles(t, map[string]string{"config.yaml": v1Config})
	cfg, err := LoadConfig(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	no := false
	want := []kubeletv1.CredentialProvider{{
		Name: "ecr-credential-provider", MatchImages: []string{"*.dkr.ecr.*.amazonaws.com"},
		DefaultCacheDuration: &metav1.Duration{Duration: 12 * time.Hour}, APIVersion: APIVersionV1,
		Args: []string{"get-credentials"}, Env: []kubeletv1.ExecEnvVar{{Name: "HOME", Value: "/root"}},
		TokenAttributes: &kubeletv1.ServiceAccountTokenAttributes{
			ServiceAccountTokenAudience: "sts.amazonaws.com", CacheType: kubeletv1.ServiceAccountServiceAccountTokenCacheType,
			RequireServiceAccount: &no, OptionalServiceAccountAnnotationKeys: []string{"eks.amazonaws.com/ecr-role-arn"},
		},
	}}
	if diff := cmp.Diff(want, cfg.Providers); diff != "" {
		t.Errorf("providers (-want +got):\n%s", diff)
	}
	if cfg.Hash != kubeletHash(v1Config) {
		t.Errorf("hash %s, want %s", cfg.Hash, kubeletHash(v1Config))
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestLoadConfigDirectory(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"b.yml":       v1beta1Config,
		"a.json":      v1alpha1JSON,
		"c.yaml":      v1Config,
		"notes.txt":   "ignored",
		"README":      "ignored",
		"z.yaml.orig": "ignored",
	})
	if err := os.Mkdir(filepath.Join(dir, "d.yaml"), 0o700); err != nil { // directories are skipped
		t.Fatal(err)
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range cfg.Providers {
		names = append(names, p.Name)
	}
	if diff := cmp.Diff([]string{"alpha", "beta", "ecr-credential-provider"}, names); diff != "" {
		t.Errorf("provider order (-want +got):\n%s", diff)
	}
	if want := kubeletHash(v1alpha1JSON, v1beta1Config, v1Config); cfg.Hash != want {
		t.Errorf("hash %s, want %s", cfg.Hash, want)
	}
	if diff := cmp.Diff([]kubeletv1.ExecEnvVar{{Name: "A", Value: "b"}}, cfg.Providers[1].Env); diff != "" {
		t.Errorf("v1beta1 env not converted (-want +got):\n%s", diff)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"typo.yaml":     strings.Replace(v1Config, "args:", "argz:", 1),
		"dupfield.json": `{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[],"providers":[]}`,
		"alphatoken.yaml": strings.Replace(strings.Replace(v1Config, "kubelet.config.k8s.io/v1", "kubelet.config.k8s.io/v1alpha1", 1),
			"credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1alpha1", 1),
		"wrongkind.yaml":  "apiVersion: kubelet.config.k8s.io/v1\nkind: WrongKind\n",
		"kubeletcfg.yaml": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
	})
	dup := writeFiles(t, map[string]string{"1.yaml": v1Config, "2.yaml": v1Config})
	empty := writeFiles(t, map[string]string{"x.txt": v1Config})
	for _, tc := range []struct{ path, want string }{
		{"", "credential provider config path is empty"},
		{filepath.Join(dir, "missing.yaml"), `unable to access path "` + filepath.Join(dir, "missing.yaml") + `": stat ` + filepath.Join(dir, "missing.yaml") + ": no such file or directory"},
		{filepath.Join(dir, "typo.yaml"), `error decoding config "` + filepath.Join(dir, "typo.yaml") + `": strict decoding error: unknown field "providers[0].argz"`},
		{filepath.Join(dir, "dupfield.json"), `error decoding config "` + filepath.Join(dir, "dupfield.json") + `": strict decoding error: duplicate field "providers"`},
		{filepath.Join(dir, "alphatoken.yaml"), `error decoding config "` + filepath.Join(dir, "alphatoken.yaml") + `": strict decoding error: unknown field "providers[0].tokenAttributes"`},
		{filepath.Join(dir, "wrongkind.yaml"), `error decoding config "` + filepath.Join(dir, "wrongkind.yaml") + `": no kind "WrongKind" is registered for version "kubelet.config.k8s.io/v1" in scheme`},
		{filepath.Join(dir, "kubeletcfg.yaml"), `error decoding config "` + filepath.Join(dir, "kubeletcfg.yaml") + `": failed to decode "KubeletConfiguration" (wrong Kind)`},
		{dup, `duplicate provider name "ecr-credential-provider" found in configuration file(s)`},
		{empty, `no configuration files found in directory "` + empty + `"`},
	} {
		_, err := LoadConfig(tc.path)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("LoadConfig(%q) = %v\nwant prefix: %s", tc.path, err, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	valid := func() kubeletv1.CredentialProvider {
		return kubeletv1.CredentialProvider{
			Name: "foobar", MatchImages: []string{"registry.io"}, APIVersion: APIVersionV1,
			DefaultCacheDuration: &metav1.Duration{Duration: time.Minute},
		}
	}
	yes, no := true, false
	withTokens := func(mut func(*kubeletv1.ServiceAccountTokenAttributes)) []kubeletv1.CredentialProvider {
		p := valid()
		p.TokenAttributes = &kubeletv1.ServiceAccountTokenAttributes{
			ServiceAccountTokenAudience: "aud", RequireServiceAccount: &yes, CacheType: kubeletv1.TokenServiceAccountTokenCacheType,
		}
		mut(p.TokenAttributes)
		return []kubeletv1.CredentialProvider{p}
	}
	with := func(mut func(*kubeletv1.CredentialProvider)) []kubeletv1.CredentialProvider {
		p := valid()
		mut(&p)
		return []kubeletv1.CredentialProvider{p}
	}
	for _, tc := range []struct {
		name      string
		providers []kubeletv1.CredentialProvider
		want      string
	}{
		{"valid", with(func(*kubeletv1.CredentialProvider) {}), ""},
		{"valid with tokens", withTokens(func(*kubeletv1.ServiceAccountTokenAttributes) {}), ""},
		{"zero defaultCacheDuration and odd matchImages are valid", with(func(p *kubeletv1.CredentialProvider) {
			p.DefaultCacheDuration.Duration = 0
			p.MatchImages = []string{"", "http://registry.io", "registry.io:99999", "*", "[::1]"}
		}), ""},
		{"no providers", nil, "providers: Required value: at least 1 item in plugins is required"},
		{"name with slash", with(func(p *kubeletv1.CredentialProvider) { p.Name = "foo/../bar" }),
			`providers.name: Invalid value: "foo/../bar": provider name cannot contain '/'`},
		{"name with space", with(func(p *kubeletv1.CredentialProvider) { p.Name = "foo bar" }),
			`providers.name: Invalid value: "foo bar": provider name cannot contain spaces`},
		{"name dot", with(func(p *kubeletv1.CredentialProvider) { p.Name = "." }), `providers.name: Invalid value: ".": provider name cannot be '.'`},
		{"name dotdot", with(func(p *kubeletv1.CredentialProvider) { p.Name = ".." }), `providers.name: Invalid value: "..": provider name cannot be '..'`},
		{"duplicate name", []kubeletv1.CredentialProvider{valid(), valid()}, `providers.name: Duplicate value: "foobar"`},
		{"apiVersion empty", with(func(p *kubeletv1.CredentialProvider) { p.APIVersion = "" }), "providers.apiVersion: Required value"},
		{"apiVersion unknown", with(func(p *kubeletv1.CredentialProvider) { p.APIVersion = "credentialprovider.kubelet.k8s.io/v1alpha0" }),
			`providers.apiVersion: Unsupported value: "credentialprovider.kubelet.k8s.io/v1alpha0": supported values: "credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1alpha1", "credentialprovider.kubelet.k8s.io/v1beta1"`},
		{"matchImages empty", with(func(p *kubeletv1.CredentialProvider) { p.MatchImages = nil }),
			"providers.matchImages: Required value: at least 1 item in matchImages is required"},
		{"matchImages invalid", with(func(p *kubeletv1.CredentialProvider) { p.MatchImages = []string{"%invalid%"} }),
			`providers.matchImages: Invalid value: "%invalid%": match image is invalid: parse "https://%invalid%": invalid URL escape "%in"`},
		{"defaultCacheDuration missing", with(func(p *kubeletv1.CredentialProvider) { p.DefaultCacheDuration = nil }),
			"providers.defaultCacheDuration: Required value"},
		{"defaultCacheDuration negative", with(func(p *kubeletv1.CredentialProvider) { p.DefaultCacheDuration.Duration = -time.Minute }),
			`providers.defaultCacheDuration: Invalid value: "-1m0s": must be greater than or equal to 0`},
		{"audience empty", withTokens(func(a *kubeletv1.ServiceAccountTokenAttributes) { a.ServiceAccountTokenAudience = "" }),
			"providers.tokenAttributes.serviceAccountTokenAudience: Required value"},
		{"requireServiceAccount missing", withTokens(func(a *kubeletv1.ServiceAccountTokenAttributes) { a.RequireServiceAccount = nil }),
			"providers.tokenAttributes.requireServiceAccount: Required value"},
		{"tokenAttributes on v1beta1", func() []kubeletv1.CredentialProvider {
			ps := withTokens(func(*kubeletv1.ServiceAccountTokenAttributes) {})
			ps[0].APIVersion = APIVersionV1beta1
			return ps
		}(), "providers.tokenAttributes: Forbidden: tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1 API version"},
		{"required keys without requireServiceAccount", withTokens(func(a *kubeletv1.ServiceAccountTokenAttributes) {
			a.RequireServiceAccount = &no
			a.RequiredServiceAccountAnnotationKeys = []string{"a.io/b"}
		}), "providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"},
		{"invalid key", withTokens(func(a *kubeletv1.ServiceAccountTokenAttributes) {
			a.OptionalServiceAccountAnnotationKeys = []string{"cantendwithadash-"}
		}),
			`providers.tokenAttributes.optionalServiceAccountAnnotationKeys: Invalid value: "cantendwithadash-": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`},
		{"uppercase key is valid", withTokens(func(a *kubeletv1.ServiceAccountTokenAttributes) {
			a.OptionalServiceAccountAnnotationKeys = []string{"Domain.IO/Key"}
		}), ""},
		{"duplicate key", withTokens(func(a *kubeletv1.ServiceAccountTokenAttributes) {
			a.RequiredServiceAccountAnnotationKeys = []string{"now-with-dashes/simple", "now-with-dashes/simple"}
		}), `providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Duplicate value: "now-with-dashes/simple"`},
		{"key both required and optional", withTokens(func(a *kubeletv1.ServiceAccountTokenAttributes) {
			a.RequiredServiceAccountAnnotationKeys = []string{"now-with-dashes/simple-2"}
			a.OptionalServiceAccountAnnotationKeys = []string{"now-with-dashes/simple-2"}
		}), `providers.tokenAttributes: Invalid value: ["now-with-dashes/simple-2"]: annotation keys cannot be both required and optional`},
		{"cacheType empty", withTokens(func(a *kubeletv1.ServiceAccountTokenAttributes) { a.CacheType = "" }),
			"providers.tokenAttributes.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token"},
		{"cacheType unknown", withTokens(func(a *kubeletv1.ServiceAccountTokenAttributes) { a.CacheType = "invalid-cache-type" }),
			`providers.tokenAttributes.cacheType: Unsupported value: "invalid-cache-type": supported values: "ServiceAccount", "Token"`},
		{"every error at once", with(func(p *kubeletv1.CredentialProvider) {
			p.Name = "a b"
			p.APIVersion = ""
			p.DefaultCacheDuration = nil
		}), "[providers.name: Invalid value: \"a b\": provider name cannot contain spaces, providers.apiVersion: Required value, providers.defaultCacheDuration: Required value]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := (&Config{Providers: tc.providers}).Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.want != "" && (err == nil || err.Error() != "failed to validate credential provider config: "+tc.want):
				t.Errorf("Validate: %v\nwant: failed to validate credential provider config: %s", err, tc.want)
			}
		})
	}
}
