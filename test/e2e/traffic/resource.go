package traffic

import (
	"path"
)

// Resource is a kind of namespaced object the traffic writes, reads and watches.
type Resource struct {
	// Name is the resource (plural), Group and Version its API group ("" for the core
	// group) and version, Kind its kind.
	Name, Group, Version, Kind string
	// Spec, if set, is the object's spec (Jobs need a pod template); the traffic writes
	// only metadata.
	Spec map[string]any
}

// ConfigMaps and Jobs are the resources the tests write: ConfigMaps are served by every
// apiserver; Jobs by those that serve batch/v1, which a test turns off on one server to
// make the mixed version proxy send them to a peer.
var (
	ConfigMaps = Resource{Name: "configmaps", Version: "v1", Kind: "ConfigMap"}
	Jobs       = Resource{Name: "jobs", Group: "batch", Version: "v1", Kind: "Job", Spec: map[string]any{
		"suspend": true, // no controller runs in the tests, but a suspended job never needs one
		"template": map[string]any{"spec": map[string]any{
			"restartPolicy": "Never",
			"containers":    []any{map[string]any{"name": "none", "image": "registry.example/none"}},
		}},
	}}
)

// String is group/version/resource.
func (r Resource) String() string { return path.Join(r.Group, r.Version, r.Name) }

func (r Resource) apiVersion() string { return path.Join(r.Group, r.Version) }

// Collection is the path of the resource in namespace ns.
func (r Resource) Collection(ns string) string {
	prefix := "/api/" + r.Version
	if r.Group != "" {
		prefix = "/apis/" + r.Group + "/" + r.Version
	}
	return prefix + "/namespaces/" + ns + "/" + r.Name
}

// Item is the path of the object name in namespace ns.
func (r Resource) Item(ns, name string) string { return r.Collection(ns) + "/" + name }

// Annotations the traffic writes: the create that made an object, and the write that
// changed it last.
const (
	CreateAnnotation = "traffic.kplug.io/create"
	WriteAnnotation  = "traffic.kplug.io/write"
)

// newObject is the body of a create: generateName, so that a create sent twice makes two
// objects, and the create's ID in both annotations.
func (r Resource) newObject(ns, generateName, id string) map[string]any {
	o := map[string]any{
		"apiVersion": r.apiVersion(), "kind": r.Kind,
		"metadata": map[string]any{
			"generateName": generateName, "namespace": ns,
			"annotations": map[string]any{CreateAnnotation: id, WriteAnnotation: id},
		},
	}
	if r.Spec != nil {
		o["spec"] = r.Spec
	}
	return o
}
