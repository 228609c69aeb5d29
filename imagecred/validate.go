package imagecred

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletv1 "k8s.io/kubelet/config/v1"
)

// Provider API versions: the versions of CredentialProviderRequest and Response a plugin speaks.
const (
	APIVersionV1       = "credentialprovider.kubelet.k8s.io/v1"
	APIVersionV1beta1  = "credentialprovider.kubelet.k8s.io/v1beta1"
	APIVersionV1alpha1 = "credentialprovider.kubelet.k8s.io/v1alpha1"
)

var (
	supportedAPIVersions = []string{APIVersionV1, APIVersionV1alpha1, APIVersionV1beta1}
	supportedCacheTypes  = []string{
		string(kubeletv1.ServiceAccountServiceAccountTokenCacheType),
		string(kubeletv1.TokenServiceAccountTokenCacheType),
	}
)

// ValidationError lists every problem of a configuration. Its message is the kubelet's:
// "failed to validate credential provider config: " and the errors, bracketed when there
// are several.
type ValidationError struct {
	Errs field.ErrorList
}

func (e *ValidationError) Error() string {
	return "failed to validate credential provider config: " + utilerrors.NewAggregate(e.Errs.ToAggregate().Errors()).Error()
}

// Validate checks the configuration with the kubelet's rules (1.34 and later, where the
// KubeletServiceAccountTokenForCredentialProviders gate is on and tokenAttributes.cacheType
// is required) and returns a *ValidationError listing every problem, or nil.
func (c *Config) Validate() error {
	errs := validateProviders(c.Providers)
	if len(errs) == 0 {
		return nil
	}
	return &ValidationError{Errs: errs}
}

func validateProviders(providers []kubeletv1.CredentialProvider) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("providers")
	if len(providers) == 0 {
		errs = append(errs, field.Required(path, "at least 1 item in plugins is required"))
	}
	seen := sets.New[string]()
	for _, p := range providers {
		errs = append(errs, validateName(path.Child("name"), p.Name, seen)...)
		switch {
		case p.APIVersion == "":
			errs = append(errs, field.Required(path.Child("apiVersion"), ""))
		case !slices.Contains(supportedAPIVersions, p.APIVersion):
			errs = append(errs, field.NotSupported(path.Child("apiVersion"), p.APIVersion, supportedAPIVersions))
		}
		if len(p.MatchImages) == 0 {
			errs = append(errs, field.Required(path.Child("matchImages"), "at least 1 item in matchImages is required"))
		}
		for _, m := range p.MatchImages {
			if _, err := url.Parse("https://" + m); err != nil {
				errs = append(errs, field.Invalid(path.Child("matchImages"), m, fmt.Sprintf("match image is invalid: %s", err.Error())))
			}
		}
		switch {
		case p.DefaultCacheDuration == nil:
			errs = append(errs, field.Required(path.Child("defaultCacheDuration"), ""))
		case p.DefaultCacheDuration.Duration < 0:
			errs = append(errs, field.Invalid(path.Child("defaultCacheDuration"), p.DefaultCacheDuration.Duration.String(), "must be greater than or equal to 0"))
		}
		if p.TokenAttributes != nil {
			errs = append(errs, validateTokenAttributes(path.Child("tokenAttributes"), p.APIVersion, p.TokenAttributes)...)
		}
	}
	return errs
}

func validateName(path *field.Path, name string, seen sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	if strings.Contains(name, "/") {
		errs = append(errs, field.Invalid(path, name, "provider name cannot contain '/'"))
	}
	if strings.Contains(name, " ") {
		errs = append(errs, field.Invalid(path, name, "provider name cannot contain spaces"))
	}
	if name == "." {
		errs = append(errs, field.Invalid(path, name, "provider name cannot be '.'"))
	}
	if name == ".." {
		errs = append(errs, field.Invalid(path, name, "provider name cannot be '..'"))
	}
	if seen.Has(name) {
		errs = append(errs, field.Duplicate(path, name))
	}
	seen.Insert(name)
	return errs
}

func validateTokenAttributes(path *field.Path, apiVersion string, ta *kubeletv1.ServiceAccountTokenAttributes) field.ErrorList {
	var errs field.ErrorList
	if ta.ServiceAccountTokenAudience == "" {
		errs = append(errs, field.Required(path.Child("serviceAccountTokenAudience"), ""))
	}
	if ta.RequireServiceAccount == nil {
		errs = append(errs, field.Required(path.Child("requireServiceAccount"), ""))
	}
	if apiVersion != APIVersionV1 {
		errs = append(errs, field.Forbidden(path, "tokenAttributes is only supported for "+APIVersionV1+" API version"))
	}
	if ta.RequireServiceAccount != nil && !*ta.RequireServiceAccount && len(ta.RequiredServiceAccountAnnotationKeys) > 0 {
		errs = append(errs, field.Forbidden(path.Child("requiredServiceAccountAnnotationKeys"), "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"))
	}
	errs = append(errs, validateAnnotationKeys(path.Child("requiredServiceAccountAnnotationKeys"), ta.RequiredServiceAccountAnnotationKeys)...)
	errs = append(errs, validateAnnotationKeys(path.Child("optionalServiceAccountAnnotationKeys"), ta.OptionalServiceAccountAnnotationKeys)...)
	both := sets.New(ta.RequiredServiceAccountAnnotationKeys...).Intersection(sets.New(ta.OptionalServiceAccountAnnotationKeys...))
	if both.Len() > 0 {
		errs = append(errs, field.Invalid(path, sets.List(both), "annotation keys cannot be both required and optional"))
	}
	switch {
	case ta.CacheType == "":
		errs = append(errs, field.Required(path.Child("cacheType"), "cacheType is required to be set when tokenAttributes is specified. Supported values are: "+strings.Join(supportedCacheTypes, ", ")))
	case !slices.Contains(supportedCacheTypes, string(ta.CacheType)):
		errs = append(errs, field.NotSupported(path.Child("cacheType"), ta.CacheType, supportedCacheTypes))
	}
	return errs
}

func validateAnnotationKeys(path *field.Path, keys []string) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for _, k := range keys {
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(path, k, msg))
		}
		if seen.Has(k) {
			errs = append(errs, field.Duplicate(path, k))
		}
		seen.Insert(k)
	}
	return errs
}
