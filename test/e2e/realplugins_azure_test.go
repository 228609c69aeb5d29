package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/test/e2e/framework"
)

// Azure/kubelogin's non-interactive logins (service principal, workload identity) go
// through azidentity and MSAL to the authority host that --authority-host names (and, for
// workload identity, AZURE_AUTHORITY_HOST). With --disable-instance-discovery, MSAL asks
// nothing of login.microsoftonline.com: it reads <authority>/<tenant>/v2.0/.well-known/
// openid-configuration and posts a client credentials grant to its token_endpoint, over
// TLS trusted through SSL_CERT_FILE (Go's system roots). azureIDP is that authority: the
// test's own, issuing JWTs that the real kube-apiserver accepts through its structured
// JWT authenticator, so that plugin -> kplug -> apiserver is real end to end.

const (
	azureTenant   = "kplug-test-tenant"
	azureServerID = "6dae42f8-4368-4678-94ff-3960e28e3630" // AKS's server application ID
	// assertionType is the client_assertion_type of a federated (workload identity) login.
	assertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
)

// azureIDP is a Microsoft Entra ID stand-in for one tenant: OpenID discovery, its signing
// keys, and a token endpoint for the client credentials grant with a secret or a federated
// assertion.
type azureIDP struct {
	*httptest.Server
	ca     *testpki.CA
	issuer string
	key    *ecdsa.PrivateKey

	mu         sync.Mutex
	secrets    map[string]string // client ID -> secret
	assertions map[string]string // client ID -> federated token
	issued     int
}

func newAzureIDP(t *testing.T) *azureIDP {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	idp := &azureIDP{ca: testpki.NewTestCA(t, "azure-idp-ca"), key: key, secrets: map[string]string{}, assertions: map[string]string{}}
	serving, err := idp.ca.IssueServing("idp", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /"+azureTenant+"/v2.0/.well-known/openid-configuration", idp.discovery)
	mux.HandleFunc("GET /"+azureTenant+"/discovery/v2.0/keys", idp.keys)
	mux.HandleFunc("POST /"+azureTenant+"/oauth2/v2.0/token", idp.token)
	idp.Server = httptest.NewUnstartedServer(mux)
	idp.TLS = &tls.Config{Certificates: []tls.Certificate{serving.MustTLS(t)}, MinVersion: tls.VersionTLS12}
	idp.StartTLS()
	t.Cleanup(idp.Close)
	idp.issuer = idp.URL + "/" + azureTenant + "/v2.0"
	return idp
}

// authorityHost is what kubelogin's --authority-host takes (with its trailing slash).
func (idp *azureIDP) authorityHost() string { return idp.URL + "/" }

func (idp *azureIDP) tokensIssued() int {
	idp.mu.Lock()
	defer idp.mu.Unlock()
	return idp.issued
}

func (idp *azureIDP) discovery(w http.ResponseWriter, _ *http.Request) {
	base := idp.URL + "/" + azureTenant
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                idp.issuer,
		"authorization_endpoint":                base + "/oauth2/v2.0/authorize",
		"token_endpoint":                        base + "/oauth2/v2.0/token",
		"jwks_uri":                              base + "/discovery/v2.0/keys",
		"response_types_supported":              []string{"code", "id_token", "token id_token"},
		"subject_types_supported":               []string{"pairwise"},
		"id_token_signing_alg_values_supported": []string{"ES256"},
	})
}

func (idp *azureIDP) keys(w http.ResponseWriter, _ *http.Request) {
	pub, err := idp.key.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	b64url := base64.RawURLEncoding.EncodeToString
	writeJSON(w, http.StatusOK, map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": "k1",
		"x": b64url(pub[1:33]), "y": b64url(pub[33:65]),
	}}})
}

// token answers the client credentials grant as Entra ID does: an access token for the
// resource of the ".default" scope, for the client whose secret or federated token
// matches, or the OAuth error.
func (idp *azureIDP) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request", "error_description": err.Error()})
		return
	}
	f := r.PostForm
	client := f.Get("client_id")
	idp.mu.Lock()
	secret, assertion := idp.secrets[client], idp.assertions[client]
	idp.mu.Unlock()
	switch {
	case f.Get("grant_type") != "client_credentials":
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
		return
	case f.Has("client_secret") && (secret == "" || f.Get("client_secret") != secret),
		f.Has("client_assertion") && (assertion == "" || f.Get("client_assertion") != assertion || f.Get("client_assertion_type") != assertionType),
		!f.Has("client_secret") && !f.Has("client_assertion"):
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."})
		return
	}
	audience := ""
	for _, s := range strings.Fields(f.Get("scope")) {
		if a, ok := strings.CutSuffix(s, "/.default"); ok {
			audience = a
		}
	}
	if audience == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_scope"})
		return
	}
	token, err := idp.mint(client, audience, time.Hour)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	idp.mu.Lock()
	idp.issued++
	idp.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token})
}

// mint signs an access token (ES256) for client, as Entra ID's v2 tokens for an
// application: sub and appid are the client.
func (idp *azureIDP) mint(client, audience string, lifetime time.Duration) (string, error) {
	now := time.Now()
	header, _ := json.Marshal(map[string]string{"alg": "ES256", "typ": "JWT", "kid": "k1"})
	claims, _ := json.Marshal(map[string]any{
		"iss": idp.issuer, "aud": audience, "sub": client, "appid": client, "tid": azureTenant,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(lifetime).Unix(),
	})
	b64url := base64.RawURLEncoding.EncodeToString
	input := b64url(header) + "." + b64url(claims)
	digest := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, idp.key, digest[:])
	if err != nil {
		return "", err
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + b64url(sig), nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// authenticationConfig writes the apiserver's structured authentication configuration:
// tokens of idp for the AKS server ID, users "azure:<sub>".
func (idp *azureIDP) authenticationConfig(t *testing.T, dir string) string {
	t.Helper()
	doc, err := json.Marshal(map[string]any{
		"apiVersion": "apiserver.config.k8s.io/v1",
		"kind":       "AuthenticationConfiguration",
		"jwt": []any{map[string]any{
			"issuer": map[string]any{
				"url":                  idp.issuer,
				"certificateAuthority": string(idp.ca.CertPEM),
				"audiences":            []string{azureServerID},
			},
			"claimMappings": map[string]any{
				"username": map[string]string{"claim": "sub", "prefix": "azure:"},
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "authentication-config.json")
	writeBytes(t, path, doc)
	return path
}

// kubeloginSPN is the exec block of a service principal login through kubelogin at
// command (prefixed by prefix, e.g. kplug exec-cache), env added to the common part.
func kubeloginSPN(idp *azureIDP, home string, command string, prefix []string, env ...clientcmdapi.ExecEnvVar) *clientcmdapi.ExecConfig {
	args := append(prefix, "get-token", "--login", "spn", "--server-id", azureServerID, "--tenant-id", azureTenant,
		"--authority-host", idp.authorityHost(), "--disable-instance-discovery")
	return &clientcmdapi.ExecConfig{
		APIVersion:      execcred.V1,
		Command:         command,
		Args:            args,
		Env:             append(kubeloginEnv(idp, home), env...),
		InteractiveMode: clientcmdapi.IfAvailableExecInteractiveMode,
	}
}

// kubeloginEnv trusts the IdP's CA (Go reads SSL_CERT_FILE) and keeps kubelogin's own
// files (its MSAL token cache, its authentication records) in home.
func kubeloginEnv(idp *azureIDP, home string) []clientcmdapi.ExecEnvVar {
	return []clientcmdapi.ExecEnvVar{
		{Name: "SSL_CERT_FILE", Value: idp.ca.File},
		{Name: "HOME", Value: home},
		{Name: "XDG_CACHE_HOME", Value: filepath.Join(home, ".cache")},
		{Name: "KUBECACHEDIR", Value: filepath.Join(home, ".kube", "cache")},
	}
}

// TestAzureKubelogin: the real Azure/kubelogin, logging in as a service principal and by
// workload identity at the test's own Entra ID stand-in, authenticates kubectl and kplug to
// the real kube-apiserver, which maps the JWT to a user; `kplug exec-cache` runs it once per
// identity, and switching the client ID in the client's environment never serves another
// identity's token.
func TestAzureKubelogin(t *testing.T) {
	bin := framework.ToolForTest(t, "kubelogin")
	recorded := newRecordedPlugin(t, "kubelogin")
	keepKubeloginKeyring(t)
	idp := newAzureIDP(t)
	dir := t.TempDir()
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{
		{Flags: []string{"--authentication-config=" + idp.authenticationConfig(t, dir)}},
	}})
	kplug := buildBinary(t, dir, "./cmd/kplug", "kplug")
	kubectl := filepath.Join(cp.BinDir, "kubectl")
	home := t.TempDir() // kubelogin's, set in the exec blocks
	clientHome := t.TempDir()
	cacheDir := filepath.Join(dir, "cache")

	idp.mu.Lock()
	idp.secrets["app-one"], idp.secrets["app-two"], idp.secrets["app-three"] = "secret-one", "secret-two", "secret-three"
	idp.assertions["wi-app"] = "federated-token-of-wi-app"
	idp.mu.Unlock()
	federated := filepath.Join(dir, "federated-token")
	writeBytes(t, federated, []byte("federated-token-of-wi-app"))

	// The apiserver's JWT authenticator fetches the IdP's keys in the background after start.
	probe, err := idp.mint("probe", azureServerID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	probeClient := clientFor(t, cp, &framework.User{Token: probe}, 0)
	poll.Until(t, "the apiserver to accept the IdP's tokens", func() bool {
		_, err := probeClient.Discovery().ServerVersion()
		return err == nil
	})

	secretEnv := func(client, secret string) []clientcmdapi.ExecEnvVar {
		return []clientcmdapi.ExecEnvVar{{Name: "AZURE_CLIENT_ID", Value: client}, {Name: "AZURE_CLIENT_SECRET", Value: secret}}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	users := map[string]*clientcmdapi.ExecConfig{
		"spn": kubeloginSPN(idp, home, bin, nil, secretEnv("app-one", "secret-one")...),
		"spn-v1beta1": func() *clientcmdapi.ExecConfig {
			c := kubeloginSPN(idp, home, bin, nil, secretEnv("app-one", "secret-one")...)
			c.APIVersion = execcred.V1beta1
			return c
		}(),
		"workload-identity": {
			APIVersion: execcred.V1,
			Command:    bin,
			Args:       []string{"get-token", "--login", "workloadidentity", "--server-id", azureServerID, "--disable-instance-discovery"},
			Env: append(kubeloginEnv(idp, home),
				clientcmdapi.ExecEnvVar{Name: "AZURE_CLIENT_ID", Value: "wi-app"},
				clientcmdapi.ExecEnvVar{Name: "AZURE_TENANT_ID", Value: azureTenant},
				clientcmdapi.ExecEnvVar{Name: "AZURE_FEDERATED_TOKEN_FILE", Value: federated},
				clientcmdapi.ExecEnvVar{Name: "AZURE_AUTHORITY_HOST", Value: idp.authorityHost()}),
			InteractiveMode: clientcmdapi.IfAvailableExecInteractiveMode,
		},
		// Through exec-cache; the service principal comes from the client's environment
		// (as in a CI job), so that switching it is an identity switch.
		"cached": kubeloginSPN(idp, home, kplug, []string{"exec-cache", "--cache-dir", cacheDir, "--", recorded.Path}),
	}
	if err := cp.WriteExecKubeconfig(kubeconfig, users); err != nil {
		t.Fatal(err)
	}
	whoami := func(kubeContext string, env ...string) (string, error) {
		out, errOut, err := runEnv(t, hostEnv(clientHome, env...), kubectl, "--kubeconfig", kubeconfig, "--context", kubeContext,
			"auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		if err != nil {
			return out, fmt.Errorf("kubectl auth whoami --context %s: %w\n%s", kubeContext, err, errOut)
		}
		return out, nil
	}

	// kubectl, with kubelogin as the exec plugin: client-go's runtime.
	for kubeContext, want := range map[string]string{"spn": "azure:app-one", "spn-v1beta1": "azure:app-one", "workload-identity": "azure:wi-app"} {
		if got, err := whoami(kubeContext); err != nil || got != want {
			t.Errorf("kubectl as %s: %q, %v; want %s", kubeContext, got, err, want)
		}
		// kplug's runtime: kplug request, and kplug credential.
		out, errOut, err := runEnv(t, hostEnv(clientHome), kplug, "request", "--kubeconfig", kubeconfig, "--context", kubeContext,
			"/apis/authentication.k8s.io/v1/selfsubjectreviews", "-d", selfSubjectReview)
		if err != nil || !strings.Contains(out, `"username":"`+want+`"`) {
			t.Errorf("kplug request as %s: %q, %v\n%s", kubeContext, out, err, errOut)
		}
		out, errOut, err = runEnv(t, hostEnv(clientHome), kplug, "credential", "--kubeconfig", kubeconfig, "--context", kubeContext, "-o", "json", "--show-token")
		var c credentialJSON
		if err != nil || json.Unmarshal([]byte(out), &c) != nil {
			t.Fatalf("kplug credential as %s: %v\n%s%s", kubeContext, err, out, errOut)
		}
		// The expiry is kubelogin's: when it got the token plus expires_in, at most the JWT's.
		claims := jwtClaims(t, c.Token)
		exp := time.Unix(int64(claims["exp"].(float64)), 0)
		if claims["iss"] != idp.issuer || claims["aud"] != azureServerID || claims["sub"] != strings.TrimPrefix(want, "azure:") ||
			c.Expiration == nil || c.Expiration.After(exp) || c.Expiration.Before(exp.Add(-time.Minute)) {
			t.Errorf("kplug credential as %s: expiry %v, claims %v", kubeContext, c.Expiration, claims)
		}
	}

	// Through kplug exec-cache: repeated and concurrent kubectl commands run kubelogin once
	// per identity; another service principal in the client's environment is a run of its
	// own, and switching back is a hit.
	sp := func(client, secret string) []string {
		return []string{"AZURE_CLIENT_ID=" + client, "AZURE_CLIENT_SECRET=" + secret}
	}
	type step struct {
		what string
		env  []string
		want string
		run  bool
	}
	for _, st := range []step{
		{"app-one", sp("app-one", "secret-one"), "azure:app-one", true},
		{"app-one again", sp("app-one", "secret-one"), "azure:app-one", false},
		{"app-two", sp("app-two", "secret-two"), "azure:app-two", true},
		{"back to app-one", sp("app-one", "secret-one"), "azure:app-one", false},
		{"app-two again", sp("app-two", "secret-two"), "azure:app-two", false},
	} {
		before := recorded.runs()
		got, err := whoami("cached", st.env...)
		if err != nil || got != st.want {
			t.Errorf("%s: %q, %v; want %s", st.what, got, err, st.want)
		}
		if ran := recorded.runs() - before; (ran == 1) != st.run || ran > 1 {
			t.Errorf("%s: kubelogin ran %d times, want a run: %t", st.what, ran, st.run)
		}
	}
	before := recorded.runs()
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			if got, err := whoami("cached", sp("app-three", "secret-three")...); err != nil || got != "azure:app-three" {
				t.Errorf("concurrent kubectl %d: %q, %v", i, got, err)
			}
		})
	}
	wg.Wait()
	if n := recorded.runs() - before; n != 1 {
		t.Errorf("10 concurrent kubectl commands ran kubelogin %d times, want 1", n)
	}
	t.Logf("the IdP issued %d tokens for %d runs of kubelogin", idp.tokensIssued(), recorded.runs())
	err = filepath.WalkDir(cacheDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if strings.Contains(string(b), "secret-") {
			t.Errorf("%s holds a client secret", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAzureKubeloginParity: kplug's runtime (the execcred library and `kplug credential`)
// accepts exactly what client-go's exec authenticator accepts from the real kubelogin, and
// refuses what it refuses.
func TestAzureKubeloginParity(t *testing.T) {
	p := newRecordedPlugin(t, "kubelogin")
	keepKubeloginKeyring(t)
	idp := newAzureIDP(t)
	idp.secrets["app-one"] = "secret-one"
	dir := t.TempDir()
	kplug := buildBinary(t, dir, "./cmd/kplug", "kplug")
	srv := newBearerRecorder(t)
	home := t.TempDir()
	// kubelogin keeps the tokens it got in a cache of its own (MSAL's, in
	// $XDG_CACHE_HOME/.IdentityService), by client ID, and answers from it whatever the
	// secret: the wrong secret gets a home of its own, with an empty cache.
	wrongHome := t.TempDir()
	block := func(apiVersion, secret string) execBlock {
		home := home
		if secret != "secret-one" {
			home = wrongHome
		}
		b := execBlock{apiVersion: apiVersion, command: p.Path,
			args: []string{"get-token", "--login", "spn", "--server-id", azureServerID, "--tenant-id", azureTenant,
				"--authority-host", idp.authorityHost(), "--disable-instance-discovery"},
			env: [][2]string{{"AZURE_CLIENT_ID", "app-one"}, {"AZURE_CLIENT_SECRET", secret}}}
		for _, e := range kubeloginEnv(idp, home) {
			b.env = append(b.env, [2]string{e.Name, e.Value})
		}
		return b
	}
	users := map[string]execBlock{
		"v1":           block(execcred.V1, "secret-one"),
		"v1beta1":      block(execcred.V1beta1, "secret-one"),
		"v1alpha1":     block(execcred.V1alpha1, "secret-one"),
		"cluster-info": block(execcred.V1, "secret-one"),
		"extension":    block(execcred.V1, "secret-one"),
		"wrong-secret": block(execcred.V1, "not-the-secret"),
	}
	u := users["cluster-info"]
	u.clusterInfo = true
	users["cluster-info"] = u
	u = users["extension"]
	u.clusterInfo, u.extension = true, `{"audience": "parity"}`
	users["extension"] = u
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeExecKubeconfig(t, kubeconfig, srv.URL, string(testpki.PEM("CERTIFICATE", srv.Certificate().Raw)), users)

	for _, kubeContext := range []string{"v1", "v1beta1", "cluster-info"} {
		r := runParity(t, p, kplug, kubeconfig, kubeContext, srv)
		for _, token := range r.checkAccepted(t, users[kubeContext].apiVersion) {
			if claims := jwtClaims(t, token); claims["sub"] != "app-one" || claims["aud"] != azureServerID {
				t.Errorf("%s: claims %v", kubeContext, claims)
			}
		}
	}
	// The IdP refuses the secret: kubelogin fails, and both say so with its exit code.
	r := runParity(t, p, kplug, kubeconfig, "wrong-secret", srv)
	r.checkRejected(t, "failed with exit code 1", "exited with code 1")
	if !strings.Contains(r.cliStderr, "invalid_client") {
		t.Errorf("kplug credential did not pass kubelogin's stderr through: %q", r.cliStderr)
	}
	// kubelogin reads KUBERNETES_EXEC_INFO into client-go's internal type, which cannot hold
	// the exec extension (spec.cluster.config): it fails after getting the token, under
	// client-go and kplug alike.
	r = runParity(t, p, kplug, kubeconfig, "extension", srv)
	r.checkRejected(t, "failed with exit code 1", "exited with code 1")
	// v1alpha1: client-go refuses the kubeconfig; kplug runs kubelogin, which refuses it.
	r = runParity(t, p, kplug, kubeconfig, "v1alpha1", srv)
	if r.clientGoErr == nil || r.clientGoOutput != "" {
		t.Errorf("client-go accepted v1alpha1 (%v) or ran the plugin", r.clientGoErr)
	}
	if r.libErr == nil || r.cliErr == nil || !strings.Contains(r.cliStderr, "is not supported") {
		t.Errorf("v1alpha1: execcred %v, kplug credential %v %q; want kubelogin's refusal", r.libErr, r.cliErr, r.cliStderr)
	}
}
