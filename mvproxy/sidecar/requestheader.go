package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kube-apiserver publishes its --requestheader-* flags in this ConfigMap (read by every
// aggregated apiserver), as JSON lists under the keys of requestHeaderNames.
const (
	authenticationConfigNamespace = "kube-system"
	authenticationConfigName      = "extension-apiserver-authentication"
)

// requestHeaderNames are, per key of the ConfigMap, the only names the sidecar can let
// kube-apiserver read identity from: those it sets when it forwards a user and removes
// from every request (mvproxy.SetIdentityHeaders). An empty list is fine for the UID.
var requestHeaderNames = []struct {
	key, name string
	required  bool
}{
	{"requestheader-username-headers", "X-Remote-User", true},
	{"requestheader-group-headers", "X-Remote-Group", true},
	{"requestheader-extra-headers-prefix", "X-Remote-Extra-", true},
	{"requestheader-uid-headers", "X-Remote-Uid", false},
}

// RequestHeaderError is Serve's refusal to forward users to a kube-apiserver that reads
// identity from header names the sidecar does not remove from clients' requests (a
// client could name any user or group through them), or that does not read the ones it
// sets.
type RequestHeaderError struct {
	// Flag is kube-apiserver's flag (the ConfigMap key) whose names do not fit.
	Flag string
	// Names are its names, as kube-apiserver published them; Want the sidecar's.
	Names []string
	Want  string
}

func (e *RequestHeaderError) Error() string {
	return fmt.Sprintf("the local kube-apiserver reads identity from --%s=%s, but the sidecar sets and removes only %s: a client could assert any identity through the others (or users would not be forwarded); run kube-apiserver with --%s=%s",
		e.Flag, strings.Join(e.Names, ","), e.Want, e.Flag, e.Want)
}

// checkRequestHeaders compares the identity header names the local kube-apiserver reads
// from front proxies, as it publishes them, with those the sidecar handles. It returns a
// *RequestHeaderError for names that do not fit, nil when they fit or kube-apiserver
// trusts no front proxy (no ConfigMap, or no names in it), and another error when it
// could not read them (no RBAC to get the ConfigMap, say).
func checkRequestHeaders(ctx context.Context, client kubernetes.Interface) error {
	cm, err := client.CoreV1().ConfigMaps(authenticationConfigNamespace).Get(ctx, authenticationConfigName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s/%s: %w", authenticationConfigNamespace, authenticationConfigName, err)
	}
	if cm.Data["requestheader-client-ca-file"] == "" {
		return nil // no front proxy is trusted: identity headers are never read
	}
	for _, h := range requestHeaderNames {
		var names []string
		if v := cm.Data[h.key]; v != "" {
			if err := json.Unmarshal([]byte(v), &names); err != nil {
				return fmt.Errorf("reading %s/%s: %s: %w", authenticationConfigNamespace, authenticationConfigName, h.key, err)
			}
		}
		fits := slices.EqualFunc(names, []string{h.name}, strings.EqualFold) || !h.required && len(names) == 0
		if !fits {
			return &RequestHeaderError{Flag: h.key, Names: names, Want: h.name}
		}
	}
	return nil
}
