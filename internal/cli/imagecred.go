package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kplug/kplug/imagecred"
	"github.com/kplug/kplug/imagecred/kubeapi"
	"github.com/kplug/kplug/imagecred/plugin"
	"github.com/kplug/kplug/internal/output"
	"github.com/kplug/kplug/internal/version"
)

func newImageCredentialCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image-credential",
		Short: "Run kubelet image credential provider plugins outside the kubelet",
		Long: `image-credential reads a kubelet CredentialProviderConfig (--image-credential-provider-config)
and runs its plugins from a bin directory (--image-credential-provider-bin-dir) exactly as the
kubelet would, including service-account tokens (KEP-4412).`,
		Example: `  kplug image-credential validate --config /etc/kubernetes/credential-provider.yaml
  kplug image-credential get registry.example/team/app:v1 --config providers.yaml --bin-dir /usr/libexec/kubelet-plugins
  kplug image-credential get registry.example/team/app:v1 --config providers.yaml --bin-dir bin --pod team/app-7d9c`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newImageCredentialValidateCommand(), newImageCredentialGetCommand(g),
		newDockerHelperCommand(g), newImageCredentialPluginCommand())
	return cmd
}

// --- validate

type imageCredentialValidateOptions struct {
	config, binDir, output string
}

func (o *imageCredentialValidateOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.config, "config", "", "CredentialProviderConfig file or directory (required)")
	cmd.Flags().StringVar(&o.binDir, "bin-dir", "", "also check each provider's binary in this directory (the kubelet's --image-credential-provider-bin-dir)")
	addOutputFlag(cmd, &o.output, "the summary of a valid config")
}

// validConfig is what validate prints for a valid config.
type validConfig struct {
	Providers []string `json:"providers"` // names, in the order the kubelet runs them
	Hash      string   `json:"hash"`      // the kubelet's config hash (kubelet_credential_provider_config_info)
}

func newImageCredentialValidateCommand() *cobra.Command {
	o := &imageCredentialValidateOptions{}
	cmd := &cobra.Command{
		Use:   "validate --config PATH [--bin-dir DIR]",
		Short: "Check a CredentialProviderConfig as the kubelet would; print every error",
		Long: `validate checks a CredentialProviderConfig as the kubelet does when it starts, and prints
every error. With --bin-dir, it also checks that each provider's binary there exists, is a
regular file and is executable, as the kubelet does before it runs any: without it, a
config that validates can still keep the kubelet from starting.`,
		Example: `  kplug image-credential validate --config /etc/kubernetes/credential-provider.yaml \
    --bin-dir /usr/libexec/kubernetes/kubelet-plugins
  kplug image-credential validate --config /etc/kubernetes/credential-providers/   # a directory, as kubelet 1.34+ reads it
  kplug image-credential validate --config providers.yaml -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "config"); err != nil {
				return err
			}
			if err := checkOutput(o.output); err != nil {
				return err
			}
			cfg, err := loadImageCredentialConfig(o.config)
			if err != nil {
				return err
			}
			if o.binDir != "" {
				if err := cfg.CheckBinaries(o.binDir); err != nil {
					return invalidConfig(err)
				}
			}
			if output.IsStructured(o.output) {
				v := validConfig{Providers: []string{}, Hash: cfg.Hash}
				for _, p := range cfg.Providers {
					v.Providers = append(v.Providers, p.Name)
				}
				return output.Write(cmd.OutOrStdout(), o.output, v)
			}
			checked := ""
			if o.binDir != "" {
				checked = ", their binaries in " + o.binDir + " checked"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "valid (%d providers, config hash %s%s)\n", len(cfg.Providers), cfg.Hash, checked)
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// requireFlags is a usage error (exit 2) naming the flags that are not set.
func requireFlags(cmd *cobra.Command, names ...string) error {
	var missing []string
	for _, n := range names {
		if f := cmd.Flags().Lookup(n); f == nil || f.Value.String() == "" {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) > 0 {
		return &usageError{err: fmt.Errorf("required flag(s) %s not set", strings.Join(missing, ", ")), showHelp: true}
	}
	return nil
}

// loadImageCredentialConfig loads and validates a config; every problem is an invalid
// configuration (exit 2), validation errors one per line.
func loadImageCredentialConfig(path string) (*imagecred.Config, error) {
	cfg, err := imagecred.LoadConfig(path)
	if err != nil {
		return nil, invalidConfig(fmt.Errorf("credential provider config %s: %w", path, err))
	}
	var verr *imagecred.ValidationError
	if err := cfg.Validate(); errors.As(err, &verr) {
		var b strings.Builder
		fmt.Fprintf(&b, "credential provider config %s is invalid (%d errors):", path, len(verr.Errs))
		for _, e := range verr.Errs {
			b.WriteString("\n  " + e.Error())
		}
		return nil, invalidConfig(errors.New(b.String()))
	}
	return cfg, nil
}

// --- get

type imageCredentialGetOptions struct {
	config, binDir, kubeconfig, pod string
	timeout                         time.Duration
	pullPolicy                      string
	imagePresent, verifyAccess      bool
}

func (o *imageCredentialGetOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.config, "config", "", "CredentialProviderConfig file or directory (required)")
	cmd.Flags().StringVar(&o.binDir, "bin-dir", "", "directory holding the provider plugins (required)")
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for --pod (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&o.pod, "pod", "", "NAMESPACE/NAME of the pod pulling the image; enables service-account providers")
	cmd.Flags().DurationVar(&o.timeout, "timeout", imagecred.DefaultTimeout, "how long one plugin may run")
	cmd.Flags().StringVar(&o.pullPolicy, "pull-policy", "", "the container's imagePullPolicy (Always, IfNotPresent, Never): look credentials up only when the kubelet would; empty: always look up")
	cmd.Flags().BoolVar(&o.imagePresent, "image-present", false, "with --pull-policy: the image is already on the node")
	cmd.Flags().BoolVar(&o.verifyAccess, "verify-access", false, "with --pull-policy: the pod's access to the present image must be verified against the credentials it was pulled with (KubeletEnsureSecretPulledImages)")
}

// credentialsNeeded is the kubelet's decision for the pull the flags describe; without
// --pull-policy credentials are always looked up.
func (o *imageCredentialGetOptions) credentialsNeeded(cmd *cobra.Command, image string) (bool, error) {
	if o.pullPolicy == "" {
		if cmd.Flags().Changed("image-present") || cmd.Flags().Changed("verify-access") {
			return false, &usageError{err: errors.New("--image-present and --verify-access describe a pull: set --pull-policy too"), showHelp: true}
		}
		return true, nil
	}
	pull := imagecred.Pull{Policy: corev1.PullPolicy(o.pullPolicy), Present: o.imagePresent, VerifyAccess: o.verifyAccess}
	needed, err := pull.CredentialsNeeded()
	switch {
	case errors.Is(err, imagecred.ErrImageNeverPull):
		return false, fmt.Errorf("container image %q: %w", image, err)
	case err != nil:
		return false, &usageError{err: fmt.Errorf("invalid --pull-policy %q: want Always, IfNotPresent or Never", o.pullPolicy), showHelp: true}
	}
	return needed, nil
}

func newImageCredentialGetCommand(g *globals) *cobra.Command {
	o := &imageCredentialGetOptions{}
	cmd := &cobra.Command{
		Use:   "get IMAGE --config PATH --bin-dir DIR [--kubeconfig F] [--pod NS/NAME]",
		Short: "Print the credentials the kubelet would use for IMAGE, as docker config JSON",
		Long: `get prints {"auths":{KEY:{"username","password","auth"}}} with the keys in the order the
kubelet tries them (most specific first). When several providers return credentials for one
key, the first is printed. Provider failures are reported on stderr; the command fails only
when no credentials were found and a provider failed.

With --pull-policy (and --image-present, --verify-access) get decides first, as the kubelet
does, whether credentials are needed at all: for an image already present with IfNotPresent
or Never it prints {"auths":{}} and asks no provider; for an absent image with Never it
fails.`,
		Example: `  kplug image-credential get 123456789012.dkr.ecr.eu-west-1.amazonaws.com/app:v1 \
    --config /etc/kubernetes/credential-provider.yaml --bin-dir /usr/libexec/kubernetes/kubelet-plugins
  # as the kubelet would for a pod, with its service-account token (KEP-4412)
  kplug image-credential get registry.example/team/app:v1 --config providers.yaml --bin-dir bin \
    --kubeconfig ~/.kube/config --pod team/app-7d9c > config.json
  # only when the kubelet would look credentials up (prints {"auths":{}} for a present image)
  kplug image-credential get registry.example/team/app:v1 --config providers.yaml --bin-dir bin \
    --pull-policy IfNotPresent --image-present`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd, "config", "bin-dir"); err != nil {
				return err
			}
			return o.run(cmd, g, args[0])
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func (o *imageCredentialGetOptions) run(cmd *cobra.Command, g *globals, image string) error {
	ctx := cmd.Context()
	cfg, err := loadImageCredentialConfig(o.config)
	if err != nil {
		return err
	}
	needed, err := o.credentialsNeeded(cmd, image)
	if err != nil {
		return err
	}
	if !needed {
		g.log.Info("the kubelet looks up no credentials for this pull; no provider was asked",
			"image", image, "pullPolicy", o.pullPolicy, "imagePresent", o.imagePresent)
		_, err = cmd.OutOrStdout().Write(imagecred.DockerConfigJSON(nil))
		return err
	}
	// The plugins' stderr goes to ours as they write it, so errors do not repeat it.
	opts := imagecred.Options{Config: cfg, BinDir: o.binDir, Timeout: o.timeout, PluginStderr: g.io.Err, PluginStderrShown: true}
	var pod *imagecred.Pod
	if o.pod != "" {
		ns, name, ok := strings.Cut(o.pod, "/")
		if !ok || ns == "" || name == "" {
			return &usageError{err: fmt.Errorf("invalid --pod %q: want NAMESPACE/NAME", o.pod), showHelp: true}
		}
		client, err := kubeClient(o.kubeconfig)
		if err != nil {
			return err
		}
		if pod, err = kubeapi.GetPod(ctx, client, ns, name); err != nil {
			return err
		}
		opts.ServiceAccounts = kubeapi.NewServiceAccounts(client, kubeapi.Options{})
	}
	keyring, err := imagecred.New(opts)
	if err != nil {
		return err
	}
	creds, err := keyring.Lookup(ctx, image, pod)
	if err != nil {
		if len(creds) == 0 {
			return err
		}
		g.log.Warn("some providers failed", "error", err)
	}
	if len(creds) == 0 {
		g.log.Info("no provider returned credentials; the image would be pulled anonymously", "image", image)
	}
	_, err = cmd.OutOrStdout().Write(imagecred.DockerConfigJSON(creds))
	return err
}

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := newKubeconfigFiles(kubeconfig, "", "").restConfig()
	if err != nil {
		return nil, invalidConfig(fmt.Errorf("loading kubeconfig: %w", err))
	}
	return kubernetes.NewForConfig(cfg)
}

// --- docker-helper

type dockerHelperOptions struct {
	config, binDir, cacheDir string
	timeout                  time.Duration
}

func (o *dockerHelperOptions) AddFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&o.config, "config", "", "CredentialProviderConfig file or directory (required)")
	cmd.PersistentFlags().StringVar(&o.binDir, "bin-dir", "", "directory holding the provider plugins (required)")
	cmd.PersistentFlags().StringVar(&o.cacheDir, "cache-dir", "", "keep provider answers here between runs: a directory of your own (created 0700; refused if another user owns it or may write to it), 0600 files; empty: no cache")
	cmd.PersistentFlags().DurationVar(&o.timeout, "timeout", imagecred.DefaultTimeout, "how long one plugin may run")
}

func newDockerHelperCommand(g *globals) *cobra.Command {
	o := &dockerHelperOptions{}
	cmd := &cobra.Command{
		Use:   "docker-helper",
		Short: "A docker credential helper backed by kubelet provider plugins",
		Long: `docker-helper speaks the docker-credential-helpers protocol, so that docker, containerd,
crane, skopeo and podman can use kubelet provider plugins. Install a wrapper script named
docker-credential-<name> that runs "kplug image-credential docker-helper --config ... --bin-dir ... \"$@\"",
and name <name> in the client's credHelpers (or credsStore).

The helper is read-only: "get" runs the providers, "list" names the servers whose
credentials --cache-dir holds, "store" and "erase" are refused (exit 1). Providers that need
a service account are skipped unless it is optional.`,
		Example: `  # /usr/local/bin/docker-credential-kplug, named in ~/.docker/config.json "credHelpers":
  #!/bin/sh
  exec kplug image-credential docker-helper --config /etc/kplug/providers.yaml \
    --bin-dir /usr/libexec/kubelet-plugins --cache-dir "$HOME/.cache/kplug/credentials" "$@"

  echo registry.example | docker-credential-kplug get`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	o.AddFlags(cmd)
	get := &cobra.Command{
		Use:     "get",
		Short:   "Read a server URL on stdin, print {\"ServerURL\",\"Username\",\"Secret\"}",
		Example: `  echo registry.example | kplug image-credential docker-helper --config providers.yaml --bin-dir bin get`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "config", "bin-dir"); err != nil {
				return err
			}
			return o.get(cmd.Context(), g, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	list := &cobra.Command{
		Use:     "list",
		Short:   "Print {SERVER:USERNAME} for the credentials --cache-dir holds now ({} without one)",
		Example: `  kplug image-credential docker-helper --config providers.yaml --bin-dir bin --cache-dir "$HOME/.cache/kplug/credentials" list`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cache imagecred.CacheLister
			if o.cacheDir != "" {
				c, err := imagecred.NewDirCache(o.cacheDir)
				if err != nil {
					return err
				}
				cache = c
			}
			return imagecred.DockerHelperList(cache, time.Now(), cmd.OutOrStdout())
		},
	}
	cmd.AddCommand(get, list, dockerHelperReadOnlyCommand("store"), dockerHelperReadOnlyCommand("erase"), &cobra.Command{
		Use:     "version",
		Short:   "Print the helper's version, as credential helpers do",
		Example: `  docker-credential-kplug version`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "kplug image-credential docker-helper (github.com/kplug/kplug) %s\n", version.Get().Kplug)
			return err
		},
	})
	return cmd
}

// dockerHelperReadOnlyCommand refuses the protocol's action (store or erase) as read-only
// helpers do: the refusal on stdout, where clients read a helper's error, and exit 1.
func dockerHelperReadOnlyCommand(action string) *cobra.Command {
	return &cobra.Command{
		Use:     action,
		Short:   "Refused: the helper is read-only (exit 1)",
		Example: "  echo registry.example | docker-credential-kplug " + action + "   # refused: credentials come from the providers",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return imagecred.DockerHelperReadOnly(action, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

func (o *dockerHelperOptions) get(ctx context.Context, g *globals, in io.Reader, out io.Writer) error {
	cfg, err := loadImageCredentialConfig(o.config)
	if err != nil {
		return err
	}
	opts := imagecred.Options{Config: cfg, BinDir: o.binDir, Timeout: o.timeout, PluginStderr: g.io.Err}
	if o.cacheDir != "" {
		if opts.Cache, err = imagecred.NewDirCache(o.cacheDir); err != nil {
			return err
		}
	}
	keyring, err := imagecred.New(opts)
	if err != nil {
		return err
	}
	err = keyring.DockerHelperGet(ctx, in, out)
	if notFound := (*imagecred.CredentialsNotFoundError)(nil); errors.As(err, &notFound) && notFound.Err != nil {
		g.log.Warn("providers failed", "error", notFound.Err)
	}
	return err
}

// --- plugin token-exchange

type tokenExchangeOptions struct {
	plugin.TokenExchangeOptions
	cacheKeyType string
}

func (o *tokenExchangeOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Endpoint, "endpoint", "", "OAuth 2.0 token endpoint that performs the exchange: https (http only to 127.0.0.1 or [::1]); redirects are not followed (required)")
	f.StringVar(&o.Audience, "audience", "", "RFC 8693 audience parameter")
	f.StringVar(&o.Resource, "resource", "", "RFC 8693 resource parameter")
	f.StringVar(&o.Scope, "scope", "", "RFC 8693 scope parameter")
	f.StringVar(&o.Username, "username", "oauth2accesstoken", "registry username to send with the exchanged token")
	f.StringVar(&o.cacheKeyType, "cache-key-type", "Registry", "cacheKeyType of the answer: Image, Registry or Global")
}

func newImageCredentialPluginCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "Reference provider plugins, to be named in a CredentialProviderConfig",
		Example: `  # /usr/libexec/kubelet-plugins/token-exchange: a link to kplug, named in the config
  providers:
  - name: token-exchange
    matchImages: ["registry.example"]
    defaultCacheDuration: 5m
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args: [image-credential, plugin, token-exchange, --endpoint, "https://sts.example/token"]
    tokenAttributes: {serviceAccountTokenAudience: registry.example, cacheType: ServiceAccount, requireServiceAccount: true}`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	o := &tokenExchangeOptions{}
	te := &cobra.Command{
		Use:   "token-exchange --endpoint URL",
		Short: "Exchange the pod's service-account token for registry credentials (RFC 8693)",
		Long: `token-exchange is a credential provider plugin: it reads a CredentialProviderRequest on
stdin, exchanges its service-account token at --endpoint with OAuth 2.0 Token Exchange, and
answers with the access token as the password for the image's registry, cached for 90 % of
its lifetime. Configure it with tokenAttributes and apiVersion credentialprovider.kubelet.k8s.io/v1.
The token goes only to --endpoint: https (http only to a loopback IP address), no redirects.`,
		Example: `  # in a CredentialProviderConfig provider whose binary is kplug:
  args: [image-credential, plugin, token-exchange, --endpoint, "https://sts.example/token", --audience, registry, --username, puller]
  # by hand, with a request as the kubelet sends it:
  kplug image-credential plugin token-exchange --endpoint https://sts.example/token < request.json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "endpoint"); err != nil {
				return err
			}
			switch k := plugin.CacheKeyType(o.cacheKeyType); k {
			case plugin.CacheImage, plugin.CacheRegistry, plugin.CacheGlobal:
				o.CacheKeyType = k
			default:
				return &usageError{err: fmt.Errorf("invalid --cache-key-type %q: want Image, Registry or Global", o.cacheKeyType), showHelp: true}
			}
			f, err := plugin.TokenExchange(o.TokenExchangeOptions)
			if err != nil {
				return invalidConfig(err)
			}
			useFallbackRoots() // the endpoint may be public, and the image has no CA bundle
			return plugin.Run(cmd.Context(), f, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	o.AddFlags(te)
	cmd.AddCommand(te)
	return cmd
}
