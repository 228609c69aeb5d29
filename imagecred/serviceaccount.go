package imagecred

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
)

// Pod identifies the pod an image is pulled for. Providers with tokenAttributes use it to get
// a token for ServiceAccountName bound to the pod.
type Pod struct {
	Namespace          string
	Name               string
	UID                types.UID
	ServiceAccountName string
}

// ServiceAccount is what a provider needs to know about the pod's service account.
type ServiceAccount struct {
	UID         types.UID
	Annotations map[string]string
}

// TokenRequest asks for a service-account token for one audience, bound to a pod.
type TokenRequest struct {
	Namespace         string
	ServiceAccount    string
	ServiceAccountUID types.UID
	Audience          string
	PodName           string
	PodUID            types.UID
}

// ServiceAccounts reads service accounts and requests their tokens, as the kubelet does from
// the API server; package imagecred/kubeapi has the implementation over client-go (kept
// there so that imagecred does not link the typed clientset). Implementations must be
// safe for concurrent use.
type ServiceAccounts interface {
	ServiceAccount(ctx context.Context, namespace, name string) (*ServiceAccount, error)
	Token(ctx context.Context, req TokenRequest) (string, error)
}
