package imagecred

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestPullCredentialsNeeded is the kubelet's decision (pkg/kubelet/images/image_manager.go
// and pullmanager, 1.34+): every combination of policy, presence and verification.
func TestPullCredentialsNeeded(t *testing.T) {
	for _, tc := range []struct {
		pull Pull
		want bool
		err  error
	}{
		{Pull{Policy: corev1.PullAlways}, true, nil},
		{Pull{Policy: corev1.PullAlways, Present: true}, true, nil},
		{Pull{Policy: corev1.PullAlways, Present: true, VerifyAccess: true}, true, nil},
		{Pull{Policy: corev1.PullIfNotPresent}, true, nil},
		// kubernetes/kubernetes#132951: 1.33 looked up credentials here.
		{Pull{Policy: corev1.PullIfNotPresent, Present: true}, false, nil},
		{Pull{Policy: corev1.PullIfNotPresent, Present: true, VerifyAccess: true}, true, nil},
		{Pull{Policy: corev1.PullNever}, false, ErrImageNeverPull},
		{Pull{Policy: corev1.PullNever, VerifyAccess: true}, false, ErrImageNeverPull},
		{Pull{Policy: corev1.PullNever, Present: true}, false, nil},
		{Pull{Policy: corev1.PullNever, Present: true, VerifyAccess: true}, true, nil},
	} {
		got, err := tc.pull.CredentialsNeeded()
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%+v: %v, %v; want %v, %v", tc.pull, got, err, tc.want, tc.err)
		}
	}
	_, err := Pull{Policy: "Sometimes"}.CredentialsNeeded()
	if err == nil || err.Error() != `imagecred: invalid image pull policy "Sometimes": want Always, IfNotPresent or Never` {
		t.Errorf("unknown policy: %v", err)
	}
}
