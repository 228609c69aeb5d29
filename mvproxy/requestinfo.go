package mvproxy

import (
	"strings"

	"github.com/kplug/kplug/mvproxy/discovery"
)

// ResourceOf returns the resource a request path addresses, with the rules kube-apiserver
// uses to fill RequestInfo: /api/{version}/... for the core group, /apis/{group}/{version}/...
// otherwise, an optional watch or proxy verb segment, an optional namespaces/{ns} scope.
// It reports false for non-resource paths, including discovery (/api, /apis, /apis/{group},
// /apis/{group}/{version}) and anything outside /api and /apis.
func ResourceOf(path string) (discovery.GVR, bool) {
	g, _, ok := resourceOf(path)
	return g, ok
}

// resourceOf is ResourceOf that also returns the subresource, if any.
func resourceOf(path string) (discovery.GVR, string, bool) {
	parts := splitPath(path)
	if len(parts) < 3 {
		return discovery.GVR{}, "", false
	}
	var g discovery.GVR
	switch parts[0] {
	case "api":
		parts = parts[1:]
	case "apis":
		parts = parts[1:]
		if len(parts) < 3 {
			return discovery.GVR{}, "", false
		}
		g.Group, parts = parts[0], parts[1:]
	default:
		return discovery.GVR{}, "", false
	}
	g.Version, parts = parts[0], parts[1:]
	verb := false // watch and proxy take no subresource
	if parts[0] == "watch" || parts[0] == "proxy" {
		if len(parts) < 2 {
			return discovery.GVR{}, "", false
		}
		parts, verb = parts[1:], true
	}
	// namespaces/{ns}/{resource}... scopes the request; namespaces/{ns} and
	// namespaces/{ns}/status|finalize address the namespace itself.
	if parts[0] == "namespaces" && len(parts) > 2 && parts[2] != "status" && parts[2] != "finalize" {
		parts = parts[2:]
	}
	g.Resource = parts[0]
	sub := ""
	if len(parts) >= 3 && !verb {
		sub = parts[2]
	}
	return g, sub, g.Resource != ""
}

func splitPath(path string) []string {
	path = strings.Trim(path, "/")
	if path == "" {
		return nil
	}
	return strings.Split(path, "/")
}
