package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/test/e2e/framework"
)

// aws-iam-authenticator's `token` presigns an STS GetCallerIdentity request with the AWS
// credentials it finds (environment, then the shared credentials file), offline: these fake
// keys are never sent anywhere, and the tests need no network.
const (
	awsKeyDefault = "AKIAKPLUGTESTDEFAULT"
	awsKeyProd    = "AKIAKPLUGTESTPROD001"
	awsKeyEnvA    = "AKIAKPLUGTESTENVA001"
	awsKeyEnvB    = "AKIAKPLUGTESTENVB001"
	awsKeyEnvC    = "AKIAKPLUGTESTENVC001"
	awsKeyEdited  = "AKIAKPLUGTESTEDITED1"
)

func awsSecret(key string) string { return "fake-secret-of-" + key }

// awsEnv is the environment that makes aws-iam-authenticator find credentials only where
// the test puts them: the keys given (none if key is empty), a shared credentials file
// (credentials may be "", for none), no config file and no instance metadata.
func awsEnv(dir, key, credentials string) [][2]string {
	if credentials == "" {
		credentials = filepath.Join(dir, "no-such-credentials")
	}
	env := [][2]string{
		{"AWS_REGION", "eu-west-1"},
		{"AWS_SHARED_CREDENTIALS_FILE", credentials},
		{"AWS_CONFIG_FILE", filepath.Join(dir, "no-such-config")},
		{"AWS_EC2_METADATA_DISABLED", "true"},
	}
	if key != "" {
		env = append(env, [2]string{"AWS_ACCESS_KEY_ID", key}, [2]string{"AWS_SECRET_ACCESS_KEY", awsSecret(key)})
	}
	return env
}

// writeAWSCredentials writes a shared credentials file with two profiles.
func writeAWSCredentials(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "credentials")
	doc := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n\n[prod]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
		awsKeyDefault, awsSecret(awsKeyDefault), awsKeyProd, awsSecret(awsKeyProd))
	writeBytes(t, path, []byte(doc))
	return path
}

// awsTokenKey checks that token is an aws-iam-authenticator token (k8s-aws-v1. and a
// presigned STS GetCallerIdentity URL, base64url) and returns the access key it was signed
// with: whose identity it carries.
func awsTokenKey(t *testing.T, token string) string {
	t.Helper()
	payload, ok := strings.CutPrefix(token, "k8s-aws-v1.")
	if !ok {
		t.Fatalf("token %.20q... lacks the k8s-aws-v1. prefix", token)
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		t.Fatalf("token payload is not base64url: %v", err)
	}
	u, err := url.Parse(string(raw))
	if err != nil {
		t.Fatalf("token payload is not a URL: %v", err)
	}
	q := u.Query()
	if u.Scheme != "https" || !strings.HasPrefix(u.Host, "sts.") || !strings.HasSuffix(u.Host, ".amazonaws.com") ||
		q.Get("Action") != "GetCallerIdentity" || q.Get("X-Amz-SignedHeaders") != "host;x-k8s-aws-id" || q.Get("X-Amz-Signature") == "" {
		t.Fatalf("token is not a presigned STS GetCallerIdentity URL with the cluster ID signed: %s://%s%s?%v", u.Scheme, u.Host, u.Path, q)
	}
	key, _, _ := strings.Cut(q.Get("X-Amz-Credential"), "/")
	return key
}

// TestAWSIAMAuthenticatorParity: kplug's runtime (the execcred library and `kplug
// credential`) accepts exactly what client-go's exec authenticator accepts from the real
// aws-iam-authenticator, and refuses what it refuses.
func TestAWSIAMAuthenticatorParity(t *testing.T) {
	p := newRecordedPlugin(t, "aws-iam-authenticator")
	dir := t.TempDir()
	kplug := buildBinary(t, dir, "./cmd/kplug", "kplug")
	srv := newBearerRecorder(t)
	caPEM := string(testpki.PEM("CERTIFICATE", srv.Certificate().Raw))
	block := func(apiVersion, key string) execBlock {
		return execBlock{apiVersion: apiVersion, command: p.Path, args: []string{"token", "-i", "parity-cluster"}, env: awsEnv(dir, key, "")}
	}
	users := map[string]execBlock{
		"v1":             block(execcred.V1, awsKeyDefault),
		"v1beta1":        block(execcred.V1beta1, awsKeyDefault),
		"v1alpha1":       block(execcred.V1alpha1, awsKeyDefault),
		"cluster-info":   block(execcred.V1, awsKeyDefault),
		"extension":      block(execcred.V1, awsKeyDefault),
		"no-credentials": block(execcred.V1, ""),
	}
	u := users["cluster-info"]
	u.clusterInfo = true
	users["cluster-info"] = u
	u = users["extension"]
	u.clusterInfo, u.extension = true, `{"audience": "parity"}`
	users["extension"] = u
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeExecKubeconfig(t, kubeconfig, srv.URL, caPEM, users)

	for _, context := range []string{"v1", "v1beta1", "cluster-info"} {
		r := runParity(t, p, kplug, kubeconfig, context, srv)
		for _, token := range r.checkAccepted(t, users[context].apiVersion) {
			if key := awsTokenKey(t, token); key != awsKeyDefault {
				t.Errorf("%s: token signed with %s, want %s", context, key, awsKeyDefault)
			}
		}
	}

	// aws-iam-authenticator reads KUBERNETES_EXEC_INFO into client-go's internal type, which
	// cannot hold the exec extension (spec.cluster.config), and then answers v1beta1 whatever
	// was asked: a plugin bug that client-go and kplug both report the same way.
	r := runParity(t, p, kplug, kubeconfig, "extension", srv)
	const wrongVersion = "exec plugin is configured to use API version client.authentication.k8s.io/v1, plugin returned version client.authentication.k8s.io/v1beta1"
	r.checkRejected(t, wrongVersion, wrongVersion)

	// No credentials anywhere: the plugin fails; both say it failed, with its exit code.
	r = runParity(t, p, kplug, kubeconfig, "no-credentials", srv)
	r.checkRejected(t, "failed with exit code 1", "exited with code 1")
	if !strings.Contains(r.cliStderr, "NoCredentialProviders") {
		t.Errorf("kplug credential did not pass the plugin's stderr through: %q", r.cliStderr)
	}

	// v1alpha1: client-go removed it in 1.24 and refuses the kubeconfig; kplug still speaks
	// it, and aws-iam-authenticator answers in the version it is asked for.
	r = runParity(t, p, kplug, kubeconfig, "v1alpha1", srv)
	if r.clientGoErr == nil || r.clientGoOutput != "" {
		t.Errorf("client-go accepted v1alpha1 (%v) or ran the plugin", r.clientGoErr)
	}
	if r.libErr != nil || r.cliErr != nil {
		t.Fatalf("v1alpha1: execcred %v, kplug credential %v\n%s", r.libErr, r.cliErr, r.cliStderr)
	}
	for _, c := range []struct{ output, token string }{{r.libOutput, r.libCred.Token}, {r.cliOutput, r.cliCred.Token}} {
		printed := decodePluginOutput(t, c.output)
		if printed.APIVersion != execcred.V1alpha1 || c.token != printed.Status.Token {
			t.Errorf("v1alpha1: the plugin answered %s; kplug took %.30q...", printed.APIVersion, c.token)
		}
		awsTokenKey(t, c.token)
	}
}

// awsCacheSetup is a kubeconfig whose users run aws-iam-authenticator (behind its recorder)
// through `kplug exec-cache`, and the `kplug credential` client that asks for them.
type awsCacheSetup struct {
	p                           *recordedPlugin
	kplug, kubeconfig, cacheDir string
	home                        string // the clients' HOME
	credentials                 string // the shared credentials file: [default] and [prod]
}

func newAWSCacheSetup(t *testing.T) *awsCacheSetup {
	t.Helper()
	dir := t.TempDir()
	s := &awsCacheSetup{
		p:        newRecordedPlugin(t, "aws-iam-authenticator"),
		kplug:    buildBinary(t, dir, "./cmd/kplug", "kplug"),
		cacheDir: filepath.Join(dir, "cache"),
		home:     t.TempDir(),
	}
	s.credentials = writeAWSCredentials(t, dir)
	s.kubeconfig = filepath.Join(dir, "kubeconfig")
	users := map[string]execBlock{}
	for _, cluster := range []string{"one", "two"} {
		users[cluster] = execBlock{
			apiVersion: execcred.V1beta1,
			command:    s.kplug,
			args:       []string{"exec-cache", "--cache-dir", s.cacheDir, "--", s.p.Path, "token", "-i", "cluster-" + cluster},
			// The shared credentials file is the kubeconfig's; which profile, or keys of
			// their own, come from the client's environment, as from a terminal.
			env: awsEnv(dir, "", s.credentials),
		}
	}
	// No -i: the cluster ID comes from KUBERNETES_AWS_AUTHENTICATOR_CLUSTER_ID, which
	// aws-iam-authenticator reads too.
	users["env-cluster"] = execBlock{
		apiVersion: execcred.V1beta1, command: s.kplug, env: users["one"].env,
		args: []string{"exec-cache", "--cache-dir", s.cacheDir, "--", s.p.Path, "token"},
	}
	// With the exec extension, the plugin answers v1beta1 to a v1 request (see
	// TestAWSIAMAuthenticatorParity).
	users["extension"] = execBlock{
		apiVersion: execcred.V1, command: s.kplug, clusterInfo: true, extension: `{"audience": "x"}`,
		args: users["one"].args, env: users["one"].env,
	}
	writeExecKubeconfig(t, s.kubeconfig, "https://127.0.0.1:1", "", users)
	return s
}

// credential runs `kplug credential` for the context with the client environment env (on
// top of hostEnv) and returns the token.
func (s *awsCacheSetup) credential(t *testing.T, context string, env ...string) (string, error) {
	out, errOut, err := runEnv(t, hostEnv(s.home, env...), s.kplug, "credential", "--kubeconfig", s.kubeconfig, "--context", context, "-o", "json", "--show-token")
	if err != nil {
		return "", fmt.Errorf("kplug credential --context %s: %w\n%s", context, err, errOut)
	}
	var c credentialJSON
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		return "", err
	}
	if c.Expiration == nil {
		return "", fmt.Errorf("no expiry in %s", out)
	}
	return c.Token, nil
}

// TestAWSIAMAuthenticatorExecCache: `kplug exec-cache -- aws-iam-authenticator token -i C`
// runs the plugin once for repeated calls, and never gives one identity's token to another:
// another AWS_PROFILE, other access keys or another cluster ID (-i, or the environment's
// KUBERNETES_AWS_AUTHENTICATOR_CLUSTER_ID, or the profile's keys edited in the shared
// credentials file) each make a run of their own and a token signed for them, and
// switching back is served from the cache. Each call is a `kplug credential` process, a
// client of its own, with the environment a terminal would give it.
func TestAWSIAMAuthenticatorExecCache(t *testing.T) {
	s := newAWSCacheSetup(t)
	original, err := os.ReadFile(s.credentials)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(original), "aws_access_key_id = "+awsKeyDefault+"\naws_secret_access_key = "+awsSecret(awsKeyDefault),
		"aws_access_key_id = "+awsKeyEdited+"\naws_secret_access_key = "+awsSecret(awsKeyEdited), 1)
	type step struct {
		what, context string
		env           []string
		credentials   string // if set, the shared credentials file is rewritten with it first
		key           string // the access key the token must carry
		run           bool   // whether the plugin must run (a miss)
		sameAs        string // a hit: the token of this earlier step
	}
	keys := func(key string) []string {
		return []string{"AWS_ACCESS_KEY_ID=" + key, "AWS_SECRET_ACCESS_KEY=" + awsSecret(key)}
	}
	steps := []step{
		{what: "default profile", context: "one", key: awsKeyDefault, run: true},
		{what: "default profile again", context: "one", key: awsKeyDefault, sameAs: "default profile"},
		{what: "AWS_PROFILE=prod", context: "one", env: []string{"AWS_PROFILE=prod"}, key: awsKeyProd, run: true},
		{what: "back to the default profile", context: "one", key: awsKeyDefault, sameAs: "default profile"},
		{what: "AWS_PROFILE=prod again", context: "one", env: []string{"AWS_PROFILE=prod"}, key: awsKeyProd, sameAs: "AWS_PROFILE=prod"},
		{what: "access key A", context: "one", env: keys(awsKeyEnvA), key: awsKeyEnvA, run: true},
		{what: "access key B", context: "one", env: keys(awsKeyEnvB), key: awsKeyEnvB, run: true},
		{what: "back to access key A", context: "one", env: keys(awsKeyEnvA), key: awsKeyEnvA, sameAs: "access key A"},
		{what: "cluster two", context: "two", key: awsKeyDefault, run: true},
		{what: "back to cluster one", context: "one", key: awsKeyDefault, sameAs: "default profile"},
		{what: "cluster two again", context: "two", key: awsKeyDefault, sameAs: "cluster two"},
		{what: "cluster A from the environment", context: "env-cluster", env: []string{"KUBERNETES_AWS_AUTHENTICATOR_CLUSTER_ID=cluster-a"}, key: awsKeyDefault, run: true},
		{what: "cluster B from the environment", context: "env-cluster", env: []string{"KUBERNETES_AWS_AUTHENTICATOR_CLUSTER_ID=cluster-b"}, key: awsKeyDefault, run: true},
		{what: "back to cluster A", context: "env-cluster", env: []string{"KUBERNETES_AWS_AUTHENTICATOR_CLUSTER_ID=cluster-a"}, key: awsKeyDefault, sameAs: "cluster A from the environment"},
		// The same AWS_PROFILE (none: default), another identity: an edit of the file.
		{what: "the default profile's keys edited in the credentials file", context: "one", credentials: edited, key: awsKeyEdited, run: true},
		{what: "the credentials file restored", context: "one", credentials: string(original), key: awsKeyDefault, sameAs: "default profile"},
	}
	tokens := map[string]string{}
	for _, st := range steps {
		if st.credentials != "" {
			writeBytes(t, s.credentials, []byte(st.credentials))
		}
		before := s.p.runs()
		token, err := s.credential(t, st.context, st.env...)
		if err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		ran := s.p.runs() - before
		switch {
		case st.run && ran != 1:
			t.Errorf("%s: the plugin ran %d times, want 1 (a new identity must not be served another's entry)", st.what, ran)
		case !st.run && ran != 0:
			t.Errorf("%s: the plugin ran %d times, want 0 (served from the cache)", st.what, ran)
		}
		if key := awsTokenKey(t, token); key != st.key {
			t.Errorf("%s: the token was signed with %s, want %s", st.what, key, st.key)
		}
		if st.sameAs != "" && token != tokens[st.sameAs] {
			t.Errorf("%s: not the token of %q", st.what, st.sameAs)
		}
		for what, other := range tokens {
			if st.sameAs == "" && token == other {
				t.Errorf("%s: the token of %q", st.what, what)
			}
		}
		tokens[st.what] = token
	}
	if n := s.p.runs(); n != 8 {
		t.Errorf("%d runs in all, want 8: one per identity", n)
	}

	// Ten clients at once for a new identity: one run, one token.
	before := s.p.runs()
	var wg sync.WaitGroup
	got := make([]string, 10)
	for i := range got {
		wg.Go(func() {
			var err error
			if got[i], err = s.credential(t, "one", keys(awsKeyEnvC)...); err != nil {
				t.Errorf("concurrent client %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if n := s.p.runs() - before; n != 1 {
		t.Errorf("10 concurrent clients ran the plugin %d times, want 1", n)
	}
	for i := range got {
		if got[i] != got[0] {
			t.Errorf("concurrent client %d: another token", i)
		}
	}
	if key := awsTokenKey(t, got[0]); key != awsKeyEnvC {
		t.Errorf("concurrent clients: the token was signed with %s, want %s", key, awsKeyEnvC)
	}

	// An answer the client refuses is passed on, with a warning, and not stored.
	for range 2 {
		before := s.p.runs()
		_, errOut, err := runEnv(t, hostEnv(s.home), s.kplug, "credential", "--kubeconfig", s.kubeconfig, "--context", "extension")
		if exitCode(err) != 1 || !strings.Contains(errOut, "exec-cache: not caching the answer") ||
			!strings.Contains(errOut, "plugin returned version client.authentication.k8s.io/v1beta1") || s.p.runs() != before+1 {
			t.Errorf("a wrong answer through exec-cache: exit %d, %d runs\n%s", exitCode(err), s.p.runs()-before, errOut)
		}
	}

	// --list shows one entry per identity (nine), the credential redacted; no file in the
	// cache holds a secret key.
	out, errOut, err := runEnv(t, hostEnv(s.home), s.kplug, "exec-cache", "--cache-dir", s.cacheDir, "--list", "-o", "json", "--", s.p.Path)
	if err != nil {
		t.Fatalf("--list: %v\n%s", err, errOut)
	}
	var listed []struct {
		Args       []string `json:"args"`
		Credential string   `json:"credential"`
		Servable   bool     `json:"servable"`
	}
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("--list -o json: %v\n%s", err, out)
	}
	if len(listed) != 9 {
		t.Errorf("--list: %d entries, want 9\n%s", len(listed), out)
	}
	for _, l := range listed {
		if !l.Servable || !strings.HasPrefix(l.Credential, "token (") || strings.Contains(out, "k8s-aws-v1.") {
			t.Errorf("--list entry %+v", l)
		}
	}
	err = filepath.WalkDir(s.cacheDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		for _, key := range []string{awsKeyDefault, awsKeyProd, awsKeyEnvA, awsKeyEnvB, awsKeyEnvC, awsKeyEdited} {
			if strings.Contains(string(b), awsSecret(key)) {
				t.Errorf("%s holds the secret access key of %s", path, key)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkExecCacheAWSIAMAuthenticator times one `aws-iam-authenticator token` as a client
// runs it: the plugin itself, and through `kplug exec-cache` with a filled cache (warm) and
// an empty one (cold). Each call is made by a new client process (a shell, which costs
// "client alone"), because exec-cache takes a second call from one client for a refresh
// after a 401. The benchmark fails if a warm call ran the plugin (the entry was replaced).
func BenchmarkExecCacheAWSIAMAuthenticator(b *testing.B) {
	bin := framework.ToolForTest(b, "aws-iam-authenticator")
	dir := b.TempDir()
	kplug := buildBinary(b, dir, "./cmd/kplug", "kplug")
	lean := buildBinary(b, dir, "./cmd/kplug-exec-cache", "kplug-exec-cache")
	cacheDir := filepath.Join(dir, "cache")
	info, err := execcred.ExecInfo(execcred.V1beta1, false, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	env := hostEnv(b.TempDir(), execcred.InfoEnv+"="+string(info))
	for _, kv := range awsEnv(dir, awsKeyDefault, "") {
		env = append(env, kv[0]+"="+kv[1])
	}
	client := func(b *testing.B, argv ...string) {
		// The shell forks the command (it is not the last one) and is its parent.
		cmd := exec.Command("/bin/sh", append([]string{"-c", `"$@"; exit $?`, "client"}, argv...)...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil || (len(argv) > 1 && !strings.Contains(string(out), "k8s-aws-v1.")) {
			b.Fatalf("%q: %v\n%s", argv, err, out)
		}
	}
	plugin := []string{bin, "token", "-i", "bench-cluster"}
	cached := append([]string{kplug, "exec-cache", "--cache-dir", cacheDir, "--"}, plugin...)
	leanCached := append([]string{lean, "--cache-dir", cacheDir, "--"}, plugin...)
	stored := func(b *testing.B) string { // the entry's ID and when it was stored
		out, errOut, err := runEnv(b, env, kplug, "exec-cache", "--cache-dir", cacheDir, "--list", "-o", "json")
		if err != nil {
			b.Fatalf("--list: %v\n%s", err, errOut)
		}
		var listed []struct{ ID, Stored string }
		if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != 1 {
			b.Fatalf("--list: %v\n%s", err, out)
		}
		return listed[0].ID + " " + listed[0].Stored
	}
	clearCache := func(b *testing.B) {
		b.StopTimer()
		if err := os.RemoveAll(cacheDir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	cases := []struct {
		name string
		op   func(b *testing.B)
	}{
		{"client alone", func(b *testing.B) { client(b, "true") }},
		{"aws-iam-authenticator alone", func(b *testing.B) { client(b, plugin...) }},
		{"exec-cache warm", func(b *testing.B) { client(b, cached...) }},
		{"kplug-exec-cache warm", func(b *testing.B) { client(b, leanCached...) }},
		{"exec-cache cold", func(b *testing.B) { clearCache(b); client(b, cached...) }},
		{"kplug-exec-cache cold", func(b *testing.B) { clearCache(b); client(b, leanCached...) }},
	}
	if base := baselineKplug(b); base != "" {
		baseCached := append([]string{base, "exec-cache", "--cache-dir", cacheDir, "--"}, plugin...)
		cases = append(cases, struct {
			name string
			op   func(b *testing.B)
		}{"baseline exec-cache warm", func(b *testing.B) { client(b, baseCached...) }})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			client(b, cached...) // the warm case starts warm
			first := stored(b)
			for b.Loop() {
				c.op(b)
			}
			if strings.HasSuffix(c.name, "warm") && stored(b) != first {
				b.Fatal("a warm call ran the plugin: the entry was replaced")
			}
		})
	}
}
