package plugin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/imagecred/plugin"
)

func TestRunAnswersInTheRequestVersion(t *testing.T) {
	hour := time.Hour
	f := func(_ context.Context, req *plugin.Request) (*plugin.Response, error) {
		auth := map[string]plugin.AuthConfig{"registry.io": {Username: "u", Password: req.ServiceAccountToken + "!"}}
		return &plugin.Response{CacheKeyType: plugin.CacheRegistry, CacheDuration: &hour, Auth: auth}, nil
	}
	for _, v := range []string{"v1", "v1beta1", "v1alpha1"} {
		t.Run(v, func(t *testing.T) {
			in := `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/` + v + `","image":"registry.io/app"`
			wantPassword := "!"
			if v == "v1" {
				in += `,"serviceAccountToken":"tok","serviceAccountAnnotations":{"a":"b"}`
				wantPassword = "tok!"
			}
			var out bytes.Buffer
			if err := plugin.Run(t.Context(), f, strings.NewReader(in+"}\n"), &out); err != nil {
				t.Fatal(err)
			}
			want := `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/` + v +
				`","cacheKeyType":"Registry","cacheDuration":"1h0m0s","auth":{"registry.io":{"username":"u","password":"` + wantPassword + `"}}}` + "\n"
			if out.String() != want {
				t.Errorf("response\n%s\nwant\n%s", out.String(), want)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	ok := func(context.Context, *plugin.Request) (*plugin.Response, error) {
		return &plugin.Response{CacheKeyType: plugin.CacheImage}, nil
	}
	const v1 = `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"r.io/a","serviceAccountToken":"secret-token"}`
	for _, tc := range []struct {
		name, in string
		f        plugin.Func
		want     string
	}{
		{"not a request", `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Image"}`, ok,
			"stdin holds a CredentialProviderResponse, not a CredentialProviderRequest"},
		{"unknown field", strings.Replace(v1, `"image"`, `"bogus":1,"image"`, 1), ok,
			"stdin is not a CredentialProviderRequest (credentialprovider.kubelet.k8s.io v1, v1beta1 or v1alpha1)"},
		{"plugin error", v1, func(context.Context, *plugin.Request) (*plugin.Response, error) { return nil, errors.New("denied") }, "denied"},
		{"bad cacheKeyType", v1, func(context.Context, *plugin.Request) (*plugin.Response, error) {
			return &plugin.Response{CacheKeyType: "image"}, nil
		}, `the plugin returned cacheKeyType "image": want Image, Registry or Global`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := plugin.Run(t.Context(), tc.f, strings.NewReader(tc.in), &out)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Run: %v, want %s", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("wrote %q despite the error", out.String())
			}
		})
	}
}

func ExampleRun() {
	static := func(_ context.Context, req *plugin.Request) (*plugin.Response, error) {
		registry, _, _ := strings.Cut(req.Image, "/")
		return &plugin.Response{
			CacheKeyType: plugin.CacheRegistry,
			Auth:         map[string]plugin.AuthConfig{registry: {Username: "robot", Password: "s3cret"}},
		}, nil
	}
	in := strings.NewReader(`{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"registry.io/team/app"}`)
	if err := plugin.Run(context.Background(), static, in, os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","auth":{"registry.io":{"username":"robot","password":"s3cret"}}}
}
