package imagecred

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	kubeletv1 "k8s.io/kubelet/config/v1"
	kubeletv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	"sigs.k8s.io/yaml"
)

// Config is a CredentialProviderConfig as the kubelet reads it: the providers of every file,
// in order, converted to the v1 types, and the hash the kubelet exports as
// kubelet_credential_provider_config_info.
type Config struct {
	Providers []kubeletv1.CredentialProvider
	// Hash is "sha256:" and the hex SHA-256 of every file read, each prefixed with its
	// length as a big-endian uint64, exactly as the kubelet computes it.
	Hash string
	// Files are the files read, in order.
	Files []string
}

// configCodecs is built on first use, not at init: every kplug command would pay for the scheme
// at start, a warm exec-cache hit included.
var configCodecs = sync.OnceValue(func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{kubeletv1.AddToScheme, kubeletv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err) // only registers types; fails on programming errors
		}
	}
	// A kubelet.config.k8s.io/v1beta1 CredentialProviderConfig has exactly the fields of the
	// v1alpha1 one (TestConfigV1beta1IsV1alpha1 holds them to it), so it decodes into that
	// type. k8s.io/kubelet/config/v1beta1 also holds the KubeletConfiguration, which links
	// component-base's feature gates and legacy metrics registry: about 3.5 ms of package
	// initialisation at the start of every kplug command, a warm exec-cache hit included.
	scheme.AddKnownTypeWithName(kubeletV1beta1.WithKind("CredentialProviderConfig"), &kubeletv1alpha1.CredentialProviderConfig{})
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict)
})

var kubeletV1beta1 = schema.GroupVersion{Group: kubeletv1.GroupName, Version: "v1beta1"}

// kubeletV1beta1Kinds are the other kinds of kubelet.config.k8s.io/v1beta1, which the
// kubelet knows and refuses as a CredentialProviderConfig with "wrong Kind" (a
// KubeletConfiguration given for one, say); TestConfigV1beta1IsV1alpha1 lists them.
var kubeletV1beta1Kinds = map[schema.GroupVersionKind]bool{
	kubeletV1beta1.WithKind("KubeletConfiguration"):       true,
	kubeletV1beta1.WithKind("SerializedNodeConfigSource"): true,
	kubeletV1beta1.WithKind("ImagePullIntent"):            true,
	kubeletV1beta1.WithKind("ImagePulledRecord"):          true,
}

// LoadConfig reads a CredentialProviderConfig from a file, or from every .json, .yaml and
// .yml file of a directory in lexical order (kubelet 1.34+), and merges the providers. It
// does not validate: call Config.Validate. Decoding is strict: an unknown or duplicate field
// is an error, as it is in the kubelet.
func LoadConfig(path string) (*Config, error) {
	if path == "" {
		return nil, errors.New("credential provider config path is empty")
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("unable to access path %q: %w", path, err)
	}
	files := []string{path}
	if info.IsDir() {
		if files, err = configFiles(path); err != nil {
			return nil, err
		}
	}

	cfg := &Config{Files: files}
	hash := sha256.New()
	seen := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // reading the configured config file is the point
		if err != nil {
			return nil, fmt.Errorf("unable to read file %q: %w", f, err)
		}
		var size [8]byte
		binary.BigEndian.PutUint64(size[:], uint64(len(data)))
		hash.Write(size[:])
		hash.Write(data)
		providers, err := decodeConfig(data)
		if err != nil {
			return nil, fmt.Errorf("error decoding config %q: %w", f, err)
		}
		for _, p := range providers {
			if seen[p.Name] {
				return nil, fmt.Errorf("duplicate provider name %q found in configuration file(s)", p.Name)
			}
			seen[p.Name] = true
			cfg.Providers = append(cfg.Providers, p)
		}
	}
	cfg.Hash = fmt.Sprintf("sha256:%x", hash.Sum(nil))
	return cfg, nil
}

// configFiles lists a config directory as the kubelet does: regular entries (symlinks
// included) with a config extension, sorted by full path.
func configFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("unable to read directory %q: %w", dir, err)
	}
	var files []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".json", ".yaml", ".yml":
			if !e.IsDir() {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no configuration files found in directory %q", dir)
	}
	sort.Strings(files)
	return files, nil
}

// decodeConfig decodes one file, JSON or YAML, of any supported version.
func decodeConfig(data []byte) ([]kubeletv1.CredentialProvider, error) {
	obj, gvk, err := configCodecs().UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		var tm metav1.TypeMeta
		if runtime.IsNotRegisteredError(err) && yaml.Unmarshal(data, &tm) == nil && kubeletV1beta1Kinds[tm.GroupVersionKind()] {
			return nil, fmt.Errorf("failed to decode %q (wrong Kind)", tm.Kind) // as the kubelet, which knows them
		}
		return nil, err
	}
	switch c := obj.(type) {
	case *kubeletv1.CredentialProviderConfig:
		return c.Providers, nil
	case *kubeletv1alpha1.CredentialProviderConfig: // v1alpha1 or v1beta1
		out := make([]kubeletv1.CredentialProvider, len(c.Providers))
		for i, p := range c.Providers {
			out[i] = kubeletv1.CredentialProvider{
				Name: p.Name, MatchImages: p.MatchImages, DefaultCacheDuration: p.DefaultCacheDuration,
				APIVersion: p.APIVersion, Args: p.Args, Env: convertEnv(p.Env, func(e kubeletv1alpha1.ExecEnvVar) (string, string) { return e.Name, e.Value }),
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("failed to decode %q (wrong Kind)", gvk.Kind)
}

func convertEnv[T any](in []T, get func(T) (string, string)) []kubeletv1.ExecEnvVar {
	if in == nil {
		return nil
	}
	out := make([]kubeletv1.ExecEnvVar, len(in))
	for i, e := range in {
		out[i].Name, out[i].Value = get(e)
	}
	return out
}
