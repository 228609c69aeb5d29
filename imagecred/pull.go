package imagecred

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Pull is what the kubelet knows about a container's image before it decides whether to
// look up credentials for it: the decision inputs of its image manager
// (pkg/kubelet/images/image_manager.go, EnsureImageExists, Kubernetes 1.34 and later).
//
// A runtime that pulls images for pods and integrates imagecred should decide with
// CredentialsNeeded before it calls Keyring.Lookup, and call Lookup at most once per pull.
// Kubernetes 1.33 looked credentials up before this decision, so that a provider plugin
// ran for every container start, even for an image already on the node: when the plugin
// could not reach its cloud (the node's network plugin restarting, say), pods that needed
// nothing from the registry failed to start (kubernetes/kubernetes#132951, fixed in 1.34
// by #133079, which made the lookup lazy and done once).
type Pull struct {
	// Policy is the container's imagePullPolicy: Always, IfNotPresent or Never.
	Policy corev1.PullPolicy
	// Present is whether the image is already on the node (for the kubelet, whether the
	// runtime has an image reference for it). It is not consulted for Always.
	Present bool
	// VerifyAccess is, for an image that is present, whether the pod's right to use it must
	// be checked against the credentials it was pulled with. With the kubelet's
	// KubeletEnsureSecretPulledImages (beta and on by default since 1.35) that is the case
	// when its imagePullCredentialsVerificationPolicy requires verifying this image (the
	// default, NeverVerifyPreloadedImages, verifies images the kubelet pulled itself) and the
	// record of that pull names Secrets or service accounts rather than credentials every
	// pod of the node may use; the kubelet then looks up the pod's credentials to compare
	// them. False for a kubelet without the feature, and for a runtime that keeps no such
	// records.
	VerifyAccess bool
}

// ErrImageNeverPull is CredentialsNeeded's error for an image that is not present with
// pull policy Never: the kubelet's ErrImageNeverPull, for which it looks up nothing.
var ErrImageNeverPull = errors.New("image is not present with pull policy of Never")

// CredentialsNeeded reports whether the kubelet would look up credentials for this pull,
// exactly as its image manager decides:
//
//	Always                         yes: it pulls whatever is present
//	IfNotPresent, image absent     yes: it pulls
//	Never, image absent            no, and ErrImageNeverPull
//	IfNotPresent or Never, present only if VerifyAccess: the pod's credentials are compared
//	                               with those the image was pulled with
//
// An unknown policy is an error: the API server admits no other value.
func (p Pull) CredentialsNeeded() (bool, error) {
	switch p.Policy {
	case corev1.PullAlways:
		return true, nil
	case corev1.PullIfNotPresent:
		return !p.Present || p.VerifyAccess, nil
	case corev1.PullNever:
		if !p.Present {
			return false, ErrImageNeverPull
		}
		return p.VerifyAccess, nil
	}
	return false, fmt.Errorf("imagecred: invalid image pull policy %q: want Always, IfNotPresent or Never", p.Policy)
}
