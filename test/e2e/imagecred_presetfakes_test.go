package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/internal/testkit/exectest"
)

// Fakes of the provider plugins the presets of docs/image-credential-presets configure,
// each an exectest behaviour: what the real plugin requires of the kubelet (arguments,
// environment, request version, token, service-account annotations), checked as the real
// one checks it and failed as it fails, with the source each rule comes from. They do not
// call the clouds: their answers say which identity the real one would have used.
func init() {
	exectest.Main(map[string]func() int{
		"ecr-credential-provider":  fakeECR,
		"auth-provider-gcp":        fakeGCP,
		"acr-credential-provider":  fakeACR,
		"crio-credential-provider": fakeCRIO,
		"sdk-plugin":               sdkPlugin, // kubelet_test.go
	})
}

// fakeRequest is a CredentialProviderRequest as the plugins read it.
type fakeRequest struct {
	Kind                      string            `json:"kind"`
	APIVersion                string            `json:"apiVersion"`
	Image                     string            `json:"image"`
	ServiceAccountToken       string            `json:"serviceAccountToken"`
	ServiceAccountAnnotations map[string]string `json:"serviceAccountAnnotations"`
}

const credentialProviderV1 = "credentialprovider.kubelet.k8s.io/v1"

// decodeStrictV1 is how the ECR and ACR plugins read stdin: the group version must be v1
// ("group version %s is not supported"), the kind CredentialProviderRequest
// (cloud-provider-aws cmd/ecr-credential-provider/plugin.go; cloud-provider-azure
// cmd/acr-credential-provider/plugin.go).
func decodeStrictV1(stdin string) (*fakeRequest, error) {
	var req fakeRequest
	if err := json.Unmarshal([]byte(stdin), &req); err != nil {
		return nil, err
	}
	if req.APIVersion != credentialProviderV1 {
		return nil, fmt.Errorf("group version %s is not supported", req.APIVersion)
	}
	if req.Kind != "CredentialProviderRequest" {
		return nil, fmt.Errorf("kind was %q, expected CredentialProviderRequest", req.Kind)
	}
	return &req, nil
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	return 1
}

func answerWith(cacheKeyType, cacheDuration string, auth map[string][2]string) int {
	resp := map[string]any{"kind": "CredentialProviderResponse", "apiVersion": credentialProviderV1, "cacheKeyType": cacheKeyType}
	if cacheDuration != "" {
		resp["cacheDuration"] = cacheDuration
	}
	if auth != nil {
		a := map[string]any{}
		for k, v := range auth {
			a[k] = map[string]string{"username": v[0], "password": v[1]}
		}
		resp["auth"] = a
	}
	if err := json.NewEncoder(os.Stdout).Encode(resp); err != nil {
		return fail("%v", err)
	}
	return 0
}

// fakeECR is ecr-credential-provider (kubernetes/cloud-provider-aws
// cmd/ecr-credential-provider/main.go): no arguments of its own; with a service-account
// token it assumes the role named by the annotation eks.amazonaws.com/ecr-role-arn, or by
// $AWS_ECR_ROLE_ARN, with AssumeRoleWithWebIdentity; without either, or without a token,
// it uses the node's AWS credentials. It answers for the image's host, cacheKeyType
// Registry, for half the ECR token's lifetime (12 h tokens: 6 h).
func fakeECR() int {
	req, err := decodeStrictV1(exectest.Current().Stdin)
	if err != nil {
		return fail("%v", err)
	}
	if req.Image == "" {
		return fail("image in plugin request was empty")
	}
	u, err := url.Parse("https://" + req.Image)
	if err != nil {
		return fail("error parsing image reference %s: %v", req.Image, err)
	}
	identity := "node-instance-role"
	if req.ServiceAccountToken != "" {
		arn, ok := req.ServiceAccountAnnotations["eks.amazonaws.com/ecr-role-arn"]
		if !ok {
			arn = os.Getenv("AWS_ECR_ROLE_ARN")
		}
		if arn != "" {
			identity = "web-identity:" + arn
		}
	}
	return answerWith("Registry", "6h0m0s", map[string][2]string{u.Hostname(): {"AWS", "ecr-token-as-" + identity}})
}

// fakeGCP is auth-provider-gcp (kubernetes/cloud-provider-gcp
// cmd/auth-provider-gcp/app/getcredentials.go, pkg/gcpcredential/gcpcredential.go,
// cmd/auth-provider-gcp/provider/provider.go): the get-credentials command with
// --authFlow (gcr, dockercfg or dockercfg-url), --identity-provider and --project-id, the
// latter required with the former. Workload Identity is used only with
// --identity-provider and the annotation iam.gke.io/enable-wi-image-pull: "true"; then a
// missing token gives an empty answer (no fallback), else the token is exchanged at STS
// for audience identitynamespace:PROJECT.svc.id.goog:PROVIDER. Otherwise the node's
// service account is used. It answers for the image's registry and Google's registries,
// cacheKeyType Image and cacheDuration 0 unless KUBE_SIDECAR_CACHE_TYPE and
// KUBE_SIDECAR_CACHE_DURATION say otherwise; stdin is decoded with encoding/json, any version.
func fakeGCP() int {
	args := exectest.Current().Args
	if len(args) == 0 || args[0] != "get-credentials" {
		return fail("the command is auth-provider-gcp get-credentials; got %q", args)
	}
	fs := pflag.NewFlagSet("get-credentials", pflag.ContinueOnError)
	authFlow := fs.StringP("authFlow", "a", "gcr", "")
	identityProvider := fs.String("identity-provider", "", "")
	projectID := fs.String("project-id", "", "")
	fs.Int("v", 0, "") // klog's, on the command line too
	if err := fs.Parse(args[1:]); err != nil {
		return fail("%v", err)
	}
	if !slices.Contains([]string{"gcr", "dockercfg", "dockercfg-url"}, *authFlow) {
		return fail("invalid value %q for authFlow", *authFlow)
	}
	if *identityProvider != "" && *projectID == "" {
		return fail("--project-id is required when --identity-provider is set")
	}
	var req fakeRequest
	if err := json.Unmarshal([]byte(exectest.Current().Stdin), &req); err != nil {
		return fail("error unmarshaling auth credential request: %v", err)
	}
	password := "node-service-account-token"
	if *identityProvider != "" && req.ServiceAccountAnnotations["iam.gke.io/enable-wi-image-pull"] == "true" {
		if req.ServiceAccountToken == "" {
			return answerWith("Image", "0s", map[string][2]string{}) // "Failing fast without fallback"
		}
		password = "federated-token-for-identitynamespace:" + *projectID + ".svc.id.goog:" + *identityProvider
	}
	auth := map[string][2]string{}
	if registry, _, ok := strings.Cut(req.Image, "/"); ok {
		auth[registry] = [2]string{"_token", password}
	}
	for _, k := range []string{"container.cloud.google.com", "gcr.io", "*.gcr.io", "*.pkg.dev"} {
		auth[k] = [2]string{"_token", password}
	}
	return answerWith("Image", "0s", auth)
}

var acrLoginServer = regexp.MustCompile(`^[a-zA-Z0-9]+\.(azurecr\.io|azurecr\.cn|azurecr\.de|azurecr\.us)`)

// fakeACR is acr-credential-provider (kubernetes-sigs/cloud-provider-azure
// cmd/acr-credential-provider/main.go, pkg/config/identity_bindings_config.go,
// pkg/credentialprovider/identity_bindings_credentials.go, azure_credentials.go,
// consts.go): exactly one argument, the Azure config file, and the identity-binding flags,
// checked as ParseIdentityBindingsConfig checks them (an --ib-apiserver-ip that is a
// name rather than an IP is resolved by the real one; this fake accepts IPs only). With
// --ib-sni-name the service-account token is required, the client ID comes from the
// annotation kubernetes.azure.com/acr-client-id or --ib-default-client-id, the tenant
// from kubernetes.azure.com/acr-tenant-id or --ib-default-tenant-id. Without identity
// bindings a token needs both annotations. It answers for the login server with the ACR
// refresh token's username, cacheKeyType Registry, 60 minutes.
func fakeACR() int {
	fs := pflag.NewFlagSet("acr-credential-provider", pflag.ContinueOnError)
	fs.StringP("registry-mirror", "r", "", "")
	sni := fs.String("ib-sni-name", "", "")
	defaultClient := fs.String("ib-default-client-id", "", "")
	defaultTenant := fs.String("ib-default-tenant-id", "", "")
	apiServerIP := fs.String("ib-apiserver-ip", "", "")
	fs.Int("v", 0, "")
	if err := fs.Parse(exectest.Current().Args); err != nil {
		return fail("%v", err)
	}
	switch n := fs.NArg(); {
	case n == 0:
		return fail("config file is not specified")
	case n > 1:
		return fail("expected exactly one argument (config file); Got arguments: %v", fs.Args())
	}
	switch {
	case strings.HasPrefix(*sni, "https://") || strings.HasPrefix(*sni, "http://"):
		return fail("--ib-sni-name must not contain protocol prefix (https:// or http://), got: %s", *sni)
	case *sni != "" && *apiServerIP == "":
		return fail("--ib-apiserver-ip must be set when --ib-sni-name is provided")
	case *defaultClient != "" && *sni == "":
		return fail("--ib-sni-name must be set when --ib-default-client-id is provided")
	case *defaultTenant != "" && *sni == "":
		return fail("--ib-sni-name must be set when --ib-default-tenant-id is provided")
	case *apiServerIP != "" && net.ParseIP(*apiServerIP) == nil:
		return fail("--ib-apiserver-ip must be a valid IP address or resolvable FQDN, got: %s (this fake resolves no names)", *apiServerIP)
	case *apiServerIP != "" && *sni == "":
		return fail("--ib-sni-name must be set when --ib-apiserver-ip is provided")
	}
	req, err := decodeStrictV1(exectest.Current().Stdin)
	if err != nil {
		return fail("%v", err)
	}
	if req.Image == "" {
		return fail("image in plugin request was empty")
	}
	loginServer := acrLoginServer.FindString(req.Image)
	if loginServer == "" {
		return answerWith("Registry", "0s", map[string][2]string{})
	}
	annotations := req.ServiceAccountAnnotations
	var identity string
	switch {
	case *sni != "":
		if req.ServiceAccountToken == "" {
			return fail("failed to get identity bindings token credential for image %s: service account token not found in request", req.Image)
		}
		client, ok := annotations["kubernetes.azure.com/acr-client-id"]
		if !ok {
			client = *defaultClient
		}
		if client == "" {
			return fail("client ID not found in service account annotations (checked kubernetes.azure.com/acr-client-id) and no default client ID configured")
		}
		tenant, ok := annotations["kubernetes.azure.com/acr-tenant-id"]
		if !ok {
			tenant = *defaultTenant
		}
		identity = "identity-binding:" + client + "@" + tenant + " via https://" + *sni
	case req.ServiceAccountToken != "":
		client, tenant := annotations["kubernetes.azure.com/acr-client-id"], annotations["kubernetes.azure.com/acr-tenant-id"]
		if client == "" {
			return fail("client id annotation kubernetes.azure.com/acr-client-id is not found or the value is empty")
		}
		if tenant == "" {
			return fail("tenant id annotation kubernetes.azure.com/acr-tenant-id is not found or the value is empty")
		}
		identity = "client-assertion:" + client + "@" + tenant
	default:
		identity = "managed-identity"
	}
	return answerWith("Registry", "1h0m0s", map[string][2]string{
		"*.azurecr.*": {"", ""},
		loginServer:   {"00000000-0000-0000-0000-000000000000", "acr-refresh-token-as-" + identity},
	})
}

// fakeCRIO is crio-credential-provider (cri-o/crio-credential-provider
// internal/pkg/app/app.go, internal/pkg/k8s/k8s.go): it reads the namespace from the
// token's kubernetes.io claim (without verifying it), lists the namespace's Secrets of type
// kubernetes.io/dockerconfigjson from the API server with the token itself, writes them to
// CRI-O's per-namespace auth file and answers with no credentials, cacheKeyType Registry.
// The real one finds the API server in /etc/kubernetes/apiserver-url.env and writes under
// /etc/crio/auth; this fake takes both from the environment the test gives it, and
// assumes registries.conf names a mirror for the image.
func fakeCRIO() int {
	var req fakeRequest
	if err := json.Unmarshal([]byte(exectest.Current().Stdin), &req); err != nil {
		return fail("unable to parse credential provider request from stdin: %v", err)
	}
	if req.ServiceAccountToken == "" {
		return fail("unable to extract namespace: request service account token is empty")
	}
	namespace, err := tokenNamespace(req.ServiceAccountToken)
	if err != nil {
		return fail("unable to extract namespace: %v", err)
	}
	client, err := kubernetes.NewForConfig(&rest.Config{
		Host: os.Getenv("FAKE_KUBE_APISERVER"), BearerToken: req.ServiceAccountToken,
		TLSClientConfig: rest.TLSClientConfig{CAFile: os.Getenv("FAKE_KUBE_CA_FILE")},
	})
	if err != nil {
		return fail("unable to connect to Kubernetes API: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) //nolint:forbidigo // a helper process: no test here
	defer cancel()
	secrets, err := client.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeDockerConfigJson)})
	if err != nil {
		return fail("unable to get secrets: unable to retrieve secrets: %v", err)
	}
	auths := map[string]json.RawMessage{}
	for _, s := range secrets.Items {
		var cfg struct {
			Auths map[string]json.RawMessage `json:"auths"`
		}
		if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg); err == nil {
			for k, v := range cfg.Auths {
				auths[k] = v
			}
		}
	}
	file := filepath.Join(os.Getenv("FAKE_CRIO_AUTH_DIR"), fmt.Sprintf("%s-%x.json", namespace, sha256.Sum256([]byte(req.Image))))
	b, _ := json.Marshal(map[string]any{"auths": auths})
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return fail("unable to create auth file: %v", err)
	}
	return answerWith("Registry", "", nil)
}

func tokenNamespace(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("unable to parse JWT token")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", fmt.Errorf("unable to parse JWT token: %w", err)
	}
	var claims struct {
		Kubernetes *struct {
			Namespace string `json:"namespace"`
		} `json:"kubernetes.io"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", fmt.Errorf("unable to parse JWT token: %w", err)
	}
	if claims.Kubernetes == nil {
		return "", errors.New("no kubernetes.io claim name in JWT claims found")
	}
	if claims.Kubernetes.Namespace == "" {
		return "", errors.New("no namespace found in kubernetes claim")
	}
	return claims.Kubernetes.Namespace, nil
}
