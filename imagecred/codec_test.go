package imagecred

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
)

func TestEncodeRequest(t *testing.T) {
	anns := map[string]string{"domain.io/annotation1": "value1"}
	for _, tc := range []struct {
		apiVersion, token string
		anns              map[string]string
		want              string
	}{
		{APIVersionV1, "", nil, `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"test.registry.io/foobar"}`},
		{APIVersionV1, "service-account-token", anns, `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"test.registry.io/foobar","serviceAccountToken":"service-account-token","serviceAccountAnnotations":{"domain.io/annotation1":"value1"}}`},
		{APIVersionV1, "", map[string]string{}, `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"test.registry.io/foobar"}`},
		// Older versions have no service-account fields; they are dropped.
		{APIVersionV1beta1, "service-account-token", anns, `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","image":"test.registry.io/foobar"}`},
		{APIVersionV1alpha1, "", nil, `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1alpha1","image":"test.registry.io/foobar"}`},
	} {
		got, err := encodeRequest(tc.apiVersion, "test.registry.io/foobar", tc.token, tc.anns)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want+"\n" {
			t.Errorf("%s: request\n%s\nwant\n%s", tc.apiVersion, got, tc.want)
		}
	}
	// The bytes decode into k8s.io/kubelet's own v1 type with nothing lost.
	got, _ := encodeRequest(APIVersionV1, "test.registry.io/foobar", "tok", anns)
	var req credentialproviderv1.CredentialProviderRequest
	dec := json.NewDecoder(strings.NewReader(string(got)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		t.Fatal(err)
	}
	if req.Image != "test.registry.io/foobar" || req.ServiceAccountToken != "tok" || !cmp.Equal(req.ServiceAccountAnnotations, anns) || req.Kind != "CredentialProviderRequest" {
		t.Errorf("decoded request %+v", req)
	}
}

func TestDecodeResponse(t *testing.T) {
	const head = `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1"`
	minute := time.Minute
	for _, tc := range []struct {
		name, body string
		wantErr    string
		wantTTL    *time.Duration
	}{
		{"complete", head + `,"cacheKeyType":"Registry","cacheDuration":"1m","auth":{"r.io":{"username":"u","password":"p"}}}`, "", &minute},
		{"cacheDuration null", head + `,"cacheKeyType":"Image","cacheDuration":null}`, "", nil},
		{"cacheDuration 0", head + `,"cacheKeyType":"Image","cacheDuration":"0"}`, "", new(time.Duration)},
		{"cacheDuration negative", head + `,"cacheKeyType":"Image","cacheDuration":"-1m"}`, "", func() *time.Duration { d := -time.Minute; return &d }()},
		{"cacheDuration number", head + `,"cacheKeyType":"Image","cacheDuration":60}`, errDecodeResponse.Error(), nil},
		{"cacheDuration in days", head + `,"cacheKeyType":"Image","cacheDuration":"1d"}`, errDecodeResponse.Error(), nil},
		{"wrong case", head + `,"CacheKeyType":"Image"}`, errDecodeResponse.Error(), nil},
		{"duplicate field", head + `,"cacheKeyType":"Image","cacheKeyType":"Image"}`, errDecodeResponse.Error(), nil},
		{"wrong kind", `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"x"}`, errDecodeResponse.Error(), nil},
		{"trailing garbage", head + `,"cacheKeyType":"Image"} x`, "error reading GVK from response: ", nil},
		{"two objects", head + `,"cacheKeyType":"Image"}` + head + `}`, "error reading GVK from response: ", nil},
		{"empty", ``, "error reading GVK from response: ", nil},
		{"other version", strings.Replace(head, "/v1", "/v1alpha1", 1) + `}`, "apiVersion from credential plugin response did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1alpha1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := decodeResponse(APIVersionV1, []byte(tc.body))
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got *time.Duration
			if resp.CacheDuration != nil {
				got = &resp.CacheDuration.Duration
			}
			if !cmp.Equal(got, tc.wantTTL) {
				t.Errorf("cacheDuration %v, want %v", got, tc.wantTTL)
			}
		})
	}
}

// FuzzDecodeResponse checks that no input panics the decoder, that a decoded response
// carries the configured version's kind, and that a strict-decoding failure never quotes
// the input (which may hold credentials).
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Image","auth":{"r":{"username":"u","password":"secret"}}}`))
	f.Add([]byte(`{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","auth":{"r":{"username":"u","password":"secret","x":1}}}`))
	f.Add([]byte(`{"apiVersion":"credentialprovider.kubelet.k8s.io/v1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := decodeResponse(APIVersionV1, data)
		if err == nil && resp == nil {
			t.Fatal("nil response without an error")
		}
		if errors.Is(err, errDecodeResponse) && err.Error() != errDecodeResponse.Error() {
			t.Fatalf("decode error carries more than the constant message: %v", err)
		}
	})
}

// FuzzDecodeConfig checks that no config file panics the decoder or the validator.
func FuzzDecodeConfig(f *testing.F) {
	f.Add([]byte(v1Config))
	f.Add([]byte(v1alpha1JSON))
	f.Add([]byte(v1beta1Config))
	f.Fuzz(func(_ *testing.T, data []byte) {
		providers, err := decodeConfig(data)
		if err == nil {
			_ = (&Config{Providers: providers}).Validate()
		}
	})
}

// FuzzKeyring checks that any auth map can be indexed and looked up, that every
// credential returned matches the image by its key, and that Docker Hub credentials that
// do not match go only to Docker Hub images: never to a registry host with a '.' or a ':'
// (registry:5000, registry.io) other than docker.io and index.docker.io.
func FuzzKeyring(f *testing.F) {
	f.Add("https://index.docker.io/v1/", "docker.io/library/nginx")
	f.Add("*.registry.io/team", "a.registry.io/team/app")
	f.Add("https://index.docker.io/v1/", "registry:5000")
	f.Add("index.docker.io", "localhost:5000/app")
	f.Fuzz(func(t *testing.T, key, image string) {
		k := keyring{locations: &locationCache{}}
		k.add("p", nil, map[string]AuthConfig{key: {Username: "u"}})
		for _, c := range k.lookup(image) {
			if ok, _ := MatchImage(c.Key, image); ok {
				continue
			}
			host, _, _ := strings.Cut(image, "/")
			if c.Key != dockerHubKey || (host != "docker.io" && host != "index.docker.io" && strings.ContainsAny(host, ".:")) {
				t.Fatalf("credential under %q returned for %q", c.Key, image)
			}
		}
	})
}
