package imagecred

import (
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/kubelet/pkg/apis/credentialprovider"
	"k8s.io/kubelet/pkg/apis/credentialprovider/install"
)

// providerCodecs encode requests and decode responses with the kubelet's own scheme and a
// strict decoder, so the bytes a plugin sees are the kubelet's. Built on first use, not
// at init: every kplug command would pay for the scheme at start.
var providerCodecs = sync.OnceValue(func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict)
})

// errDecodeResponse is deliberately the whole message: the decoder's error may quote the
// response, which holds credentials.
var errDecodeResponse = errors.New("error decoding credential provider plugin response from stdout")

// encodeRequest encodes a CredentialProviderRequest in apiVersion, newline-terminated. The
// v1alpha1 and v1beta1 encodings drop the service-account fields.
func encodeRequest(apiVersion, image, token string, annotations map[string]string) ([]byte, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, fmt.Errorf("invalid apiVersion %q: %w", apiVersion, err)
	}
	info, ok := runtime.SerializerInfoForMediaType(providerCodecs().SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		return nil, errors.New("no JSON serializer")
	}
	req := &credentialprovider.CredentialProviderRequest{
		Image:                     image,
		ServiceAccountToken:       token,
		ServiceAccountAnnotations: annotations,
	}
	return runtime.Encode(providerCodecs().EncoderForVersion(info.Serializer, gv), req)
}

// decodeResponse checks the response's apiVersion against the configured one and decodes it
// strictly: unknown, duplicate or wrongly cased fields are errors.
func decodeResponse(apiVersion string, data []byte) (*credentialprovider.CredentialProviderResponse, error) {
	gvk, err := jsonserializer.DefaultMetaFactory.Interpret(data)
	if err != nil {
		return nil, fmt.Errorf("error reading GVK from response: %w", err)
	}
	if got := gvk.GroupVersion().String(); got != apiVersion {
		return nil, fmt.Errorf("apiVersion from credential plugin response did not match expected apiVersion:%s, actual apiVersion:%s", apiVersion, got)
	}
	obj, _, err := providerCodecs().UniversalDecoder(credentialprovider.SchemeGroupVersion).Decode(data, nil, nil)
	if err != nil {
		return nil, errDecodeResponse
	}
	resp, ok := obj.(*credentialprovider.CredentialProviderResponse)
	if !ok {
		return nil, errDecodeResponse
	}
	return resp, nil
}
