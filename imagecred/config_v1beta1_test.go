package imagecred

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	kubeletv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// TestConfigV1beta1IsV1alpha1 holds the shortcut LoadConfig takes (a v1beta1
// CredentialProviderConfig decoded into the v1alpha1 type, so that kplug does not link
// k8s.io/kubelet/config/v1beta1) to the pinned kubelet module: the two types have the same
// fields, JSON names and types, and every other kind of v1beta1 is refused as the wrong
// kind. A kubelet bump that breaks either fails here.
func TestConfigV1beta1IsV1alpha1(t *testing.T) {
	if diff := cmp.Diff(shape(reflect.TypeFor[kubeletv1alpha1.CredentialProviderConfig]()), shape(reflect.TypeFor[kubeletv1beta1.CredentialProviderConfig]())); diff != "" {
		t.Errorf("CredentialProviderConfig v1alpha1 and v1beta1 differ (-v1alpha1 +v1beta1):\n%s", diff)
	}
	scheme := runtime.NewScheme()
	if err := kubeletv1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var others []string
	for kind := range scheme.KnownTypes(kubeletv1beta1.SchemeGroupVersion) {
		if kind != "CredentialProviderConfig" {
			others = append(others, kind)
			if !kubeletV1beta1Kinds[kubeletv1beta1.SchemeGroupVersion.WithKind(kind)] {
				t.Errorf("kind %s of kubelet.config.k8s.io/v1beta1 is missing from kubeletV1beta1Kinds", kind)
			}
		}
	}
	if len(others) != len(kubeletV1beta1Kinds) {
		slices.Sort(others)
		t.Errorf("kubeletV1beta1Kinds has %d kinds, kubelet.config.k8s.io/v1beta1 has %v", len(kubeletV1beta1Kinds), others)
	}
}

// shape describes t by field names, JSON tags and types, recursively, leaving out the
// package of the kubelet's own types (each version has its own ExecEnvVar).
func shape(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return "*" + shape(t.Elem())
	case reflect.Slice:
		return "[]" + shape(t.Elem())
	case reflect.Struct:
		if !strings.HasPrefix(t.PkgPath(), "k8s.io/kubelet/") {
			return t.String()
		}
		var b strings.Builder
		b.WriteString("struct {\n")
		for f := range t.Fields() {
			fmt.Fprintf(&b, "%s %s `%s`\n", f.Name, shape(f.Type), f.Tag)
		}
		b.WriteString("}")
		return b.String()
	}
	return t.String()
}
