package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/kubelet/pkg/apis/credentialprovider"
	"k8s.io/kubelet/pkg/apis/credentialprovider/install"
)

// Request is what the kubelet asks: credentials for Image, a repository without tag or
// digest (e.g. "registry.io/team/app"). ServiceAccountToken and ServiceAccountAnnotations
// are set for providers configured with tokenAttributes (credentialprovider v1 only).
type Request struct {
	Image                     string
	ServiceAccountToken       string
	ServiceAccountAnnotations map[string]string
	// APIVersion is the version the request came in, and the response goes out in.
	APIVersion string
}

// CacheKeyType says which requests a response may be reused for.
type CacheKeyType string

// The cache key types the kubelet accepts.
const (
	CacheImage    CacheKeyType = "Image"    // this image only
	CacheRegistry CacheKeyType = "Registry" // every image of the image's registry
	CacheGlobal   CacheKeyType = "Global"   // every image the provider matches
)

// AuthConfig is a registry username and password. The JSON names are the protocol's.
type AuthConfig struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// Response is a plugin's answer.
type Response struct {
	CacheKeyType CacheKeyType
	// CacheDuration is how long the answer may be reused; nil means the provider's
	// defaultCacheDuration, zero means not at all.
	CacheDuration *time.Duration
	// Auth maps registry patterns ("registry.io", "*.registry.io/team") to credentials.
	Auth map[string]AuthConfig
}

// Func is a plugin. Run (and Main) call it once per process, as the kubelet runs a plugin
// once per request. In-process, through imagecred.FuncProvider, it is called for every
// request, concurrently, so a Func meant for both must be safe for concurrent use.
type Func func(ctx context.Context, req *Request) (*Response, error)

// codecs is built on first use, not at init: every kplug command would pay for the scheme
// at start, a warm exec-cache hit included.
var codecs = sync.OnceValue(func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict)
})

// Run reads one request from in, calls f and writes its response to out. Errors say what
// went wrong without quoting the request, which holds the service-account token.
func Run(ctx context.Context, f Func, in io.Reader, out io.Writer) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	obj, gvk, err := codecs().UniversalDecoder(credentialprovider.SchemeGroupVersion).Decode(data, nil, nil)
	if err != nil {
		return errors.New("stdin is not a CredentialProviderRequest (credentialprovider.kubelet.k8s.io v1, v1beta1 or v1alpha1)")
	}
	creq, ok := obj.(*credentialprovider.CredentialProviderRequest)
	if !ok {
		return fmt.Errorf("stdin holds a %s, not a CredentialProviderRequest", gvk.Kind)
	}
	req := &Request{
		Image:                     creq.Image,
		ServiceAccountToken:       creq.ServiceAccountToken,
		ServiceAccountAnnotations: creq.ServiceAccountAnnotations,
		APIVersion:                gvk.GroupVersion().String(),
	}
	resp, err := f(ctx, req)
	if err != nil {
		return err
	}
	if resp == nil {
		return errors.New("the plugin returned no response")
	}
	switch resp.CacheKeyType {
	case CacheImage, CacheRegistry, CacheGlobal:
	default:
		return fmt.Errorf("the plugin returned cacheKeyType %q: want Image, Registry or Global", resp.CacheKeyType)
	}
	cresp := &credentialprovider.CredentialProviderResponse{
		CacheKeyType: credentialprovider.PluginCacheKeyType(resp.CacheKeyType),
		Auth:         make(map[string]credentialprovider.AuthConfig, len(resp.Auth)),
	}
	if resp.CacheDuration != nil {
		cresp.CacheDuration = &metav1.Duration{Duration: *resp.CacheDuration}
	}
	for k, v := range resp.Auth {
		cresp.Auth[k] = credentialprovider.AuthConfig{Username: v.Username, Password: v.Password}
	}
	info, _ := runtime.SerializerInfoForMediaType(codecs().SupportedMediaTypes(), runtime.ContentTypeJSON)
	encoded, err := runtime.Encode(codecs().EncoderForVersion(info.Serializer, gvk.GroupVersion()), cresp)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	_, err = out.Write(encoded)
	return err
}

// Main runs f as the whole program: stdin, stdout, and on error a message on stderr and
// exit code 1.
func Main(f Func) {
	if err := Run(context.Background(), f, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
