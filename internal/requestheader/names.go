package requestheader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kplug/kplug/internal/identityheader"
)

// kube-apiserver publishes its --requestheader-* flags in this ConfigMap (read by every
// aggregated apiserver), as JSON lists under the flags' names. Every kube-apiserver of
// the cluster writes into it the union of what it holds and its own flags, so a name,
// once published, stays until someone removes it.
const (
	Namespace     = "kube-system"
	ConfigMapName = "extension-apiserver-authentication"
	configMap     = Namespace + "/" + ConfigMapName
)

// Names are a front proxy's identity header names (package identityheader writes them).
type Names = identityheader.Names

// Default are kubeadm's names.
var Default = identityheader.Default

// flag is one --requestheader-* flag: its names in a Names, whether kube-apiserver must
// read the one the proxy sets (an apiserver without a UID flag reads no UID, which costs
// the UID only), and whether its names are prefixes.
type flag struct {
	key      string
	names    func(Names) []string
	required bool
	prefix   bool
}

var flags = []flag{
	{"requestheader-username-headers", func(n Names) []string { return n.Username }, true, false},
	{"requestheader-group-headers", func(n Names) []string { return n.Group }, true, false},
	{"requestheader-extra-headers-prefix", func(n Names) []string { return n.ExtraPrefix }, true, true},
	{"requestheader-uid-headers", func(n Names) []string { return n.UID }, false, false},
}

// Proxy describes, for messages, the proxy whose names are checked.
type Proxy struct {
	// Name names it ("the sidecar"); Server the kube-apiserver behind it ("the local
	// kube-apiserver").
	Name, Server string
	// Configurable says that the proxy takes its names from flags of the same names as
	// kube-apiserver's, which the messages then suggest.
	Configurable bool
}

// MismatchError refuses to forward users to a kube-apiserver that may read identity from
// header names the proxy does not remove from clients' requests (a client could name any
// user or group through them), or that does not read the ones it sets. The names are
// those of the ConfigMap, which holds every name any kube-apiserver of the cluster ever
// published.
type MismatchError struct {
	Proxy Proxy
	// Flag is kube-apiserver's flag (the ConfigMap key) whose names do not fit.
	Flag string
	// Names are its names, as the ConfigMap lists them; Want the proxy's.
	Names, Want []string
	// Unknown are the names the proxy does not remove: kube-apiserver may read identity
	// from them. Empty when only the name the proxy sets is missing.
	Unknown []string
}

func (e *MismatchError) Error() string {
	want := strings.Join(e.Want, ",")
	if len(e.Unknown) == 0 {
		msg := fmt.Sprintf("the request-header names in ConfigMap %s have --%s=%s, without %s, which %s sets: kube-apiserver would not believe the users it forwards; run kube-apiserver with --%s=%s",
			configMap, e.Flag, strings.Join(e.Names, ","), e.Want[0], e.Proxy.Name, e.Flag, want)
		if e.Proxy.Configurable {
			msg += fmt.Sprintf(", or %s with --%s listing first a name kube-apiserver reads", e.Proxy.Name, e.Flag)
		}
		return msg
	}
	sets := "sets and removes only " + want
	switch {
	case len(e.Want) == 0:
		sets = "neither sets nor removes any"
	case len(e.Want) > 1:
		sets = "sets " + e.Want[0] + " and removes only " + want
	}
	unknown := strings.Join(e.Unknown, ",")
	msg := fmt.Sprintf("the request-header names in ConfigMap %s have --%s=%s, but %s %s: a client could assert any identity through %s if %s reads it. "+
		"The ConfigMap keeps every name any kube-apiserver of the cluster ever published: run each with --%s=%s, then remove %s from the ConfigMap (kubectl -n %s edit configmap %s) or delete the ConfigMap, and the kube-apiservers write their current names back",
		configMap, e.Flag, strings.Join(e.Names, ","), e.Proxy.Name, sets, unknown, e.Proxy.Server, e.Flag, want, unknown, Namespace, ConfigMapName)
	if e.Proxy.Configurable {
		msg += fmt.Sprintf("; or run %s with --%s=%s, so that it removes them all", e.Proxy.Name, e.Flag, strings.Join(append(append([]string(nil), e.Want...), e.Unknown...), ","))
	}
	return msg
}

// ErrNotPublished is Check's error when kube-apiserver has not written the ConfigMap (yet:
// it does within seconds of starting).
var ErrNotPublished = errors.New("ConfigMap " + configMap + " does not exist: kube-apiserver writes it once it has started")

// Check compares the identity header names kube-apiserver reads from front proxies, as
// client reads them from the ConfigMap, with ours: every published name must be one of
// ours (a published extra prefix may also lie under one of ours), and the name we set
// must be published (for the UID only if any UID name is). It returns nil when they fit
// or no front proxy is trusted (no request-header CA), a *MismatchError naming proxy when
// they do not, and another error when it could not read
// them: ErrNotPublished, a Forbidden error (no RBAC to get the ConfigMap), or any other.
// Names differing in case only are the same header.
func Check(ctx context.Context, client kubernetes.Interface, ours Names, proxy Proxy) error {
	cm, err := client.CoreV1().ConfigMaps(Namespace).Get(ctx, ConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ErrNotPublished
	}
	if err != nil {
		return fmt.Errorf("reading ConfigMap %s: %w", configMap, err)
	}
	if cm.Data["requestheader-client-ca-file"] == "" {
		return nil // no front proxy is trusted: identity headers are never read
	}
	for _, f := range flags {
		var published []string
		if v := cm.Data[f.key]; v != "" {
			if err := json.Unmarshal([]byte(v), &published); err != nil {
				return fmt.Errorf("reading ConfigMap %s: %s: %w", configMap, f.key, err)
			}
		}
		want := f.names(ours)
		found, unknown := false, []string(nil)
		for _, n := range published {
			if len(want) > 0 && strings.EqualFold(n, want[0]) {
				found = true
			}
			if !removed(n, want, f.prefix) && !containsFold(unknown, n) {
				unknown = append(unknown, n)
			}
		}
		missing := len(want) > 0 && !found && (f.required || len(published) > 0)
		if len(unknown) > 0 || missing {
			return &MismatchError{Proxy: proxy, Flag: f.key, Names: published, Want: want, Unknown: unknown}
		}
	}
	return nil
}

// removed reports whether the proxy removes the header (or, for a prefix, every header
// under the prefix) name from clients' requests.
func removed(name string, ours []string, prefix bool) bool {
	for _, o := range ours {
		if strings.EqualFold(name, o) || prefix && len(name) >= len(o) && strings.EqualFold(name[:len(o)], o) {
			return true
		}
	}
	return false
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
