package discovery

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"strconv"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Discovery media types.
const (
	// AcceptAggregated asks for the aggregated discovery document, v2, as JSON.
	AcceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	// AcceptAggregatedProtobuf asks for the aggregated discovery document, v2, as protobuf.
	AcceptAggregatedProtobuf = protobufMediaType + ";g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	// AcceptNoPeer asks for the server's own aggregated discovery document, not merged
	// with its peers'. Servers before 1.35 ignore the profile and answer with their own
	// document anyway.
	AcceptNoPeer = AcceptAggregated + ";profile=nopeer"

	protobufMediaType = "application/vnd.kubernetes.protobuf"
	listGroup         = "apidiscovery.k8s.io"
	listVersion       = "v2"
	listKind          = "APIGroupDiscoveryList"
)

// GVR names a resource by group, version and resource, as discovery lists it. The core
// group is "". A Resource of the form "resource/subresource" names a subresource.
type GVR struct {
	Group, Version, Resource string
}

func (g GVR) String() string {
	if g.Group == "" {
		return g.Version + "/" + g.Resource
	}
	return g.Group + "/" + g.Version + "/" + g.Resource
}

// Subresource names g's subresource sub as discovery indexes it: resource/sub.
func (g GVR) Subresource(sub string) GVR {
	g.Resource += "/" + sub
	return g
}

// Document is one server's aggregated discovery: the /apis document (Groups) and the /api
// document (Core), and the resources they list. It is not modified once built, and safe
// for concurrent use.
type Document struct {
	Groups *apidiscoveryv2.APIGroupDiscoveryList
	Core   *apidiscoveryv2.APIGroupDiscoveryList
	served map[GVR]struct{}
}

// NewDocument indexes the resources of the /apis and /api documents; either may be nil.
func NewDocument(groups, core *apidiscoveryv2.APIGroupDiscoveryList) *Document {
	d := &Document{Groups: groups, Core: core, served: map[GVR]struct{}{}}
	for _, l := range []*apidiscoveryv2.APIGroupDiscoveryList{core, groups} {
		if l == nil {
			continue
		}
		for _, g := range l.Items {
			for _, v := range g.Versions {
				for _, r := range v.Resources {
					gvr := GVR{Group: g.Name, Version: v.Version, Resource: r.Resource}
					d.served[gvr] = struct{}{}
					for _, s := range r.Subresources {
						d.served[gvr.Subresource(s.Subresource)] = struct{}{}
					}
				}
			}
		}
	}
	return d
}

// Serves reports whether the document lists the resource (or, for a Resource of the form
// "resource/subresource", the subresource). A nil Document serves nothing.
func (d *Document) Serves(g GVR) bool {
	if d == nil {
		return false
	}
	_, ok := d.served[g]
	return ok
}

// Parse decodes an aggregated discovery v2 JSON document and checks what routing and
// merging rely on: the kind and apiVersion, a name for every version and resource, and no
// group, version or resource listed twice.
func Parse(data []byte) (*apidiscoveryv2.APIGroupDiscoveryList, error) {
	var l apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("decoding aggregated discovery: %w", err)
	}
	if l.Kind != listKind || l.APIVersion != listGroup+"/"+listVersion {
		return nil, fmt.Errorf("decoding aggregated discovery: got kind %q apiVersion %q, want %s %s/%s",
			l.Kind, l.APIVersion, listKind, listGroup, listVersion)
	}
	groups := map[string]bool{}
	for _, g := range l.Items {
		if groups[g.Name] {
			return nil, fmt.Errorf("aggregated discovery lists group %q twice", g.Name)
		}
		groups[g.Name] = true
		versions := map[string]bool{}
		for _, v := range g.Versions {
			if v.Version == "" || versions[v.Version] {
				return nil, fmt.Errorf("aggregated discovery: group %q has an empty or repeated version %q", g.Name, v.Version)
			}
			versions[v.Version] = true
			resources := map[string]bool{}
			for _, r := range v.Resources {
				if r.Resource == "" || resources[r.Resource] {
					return nil, fmt.Errorf("aggregated discovery: %s/%s has an empty or repeated resource %q", g.Name, v.Version, r.Resource)
				}
				resources[r.Resource] = true
			}
		}
	}
	return &l, nil
}

// Encode returns the JSON document and its ETag, computed exactly as kube-apiserver
// computes it: the quoted, upper-case hex SHA-512 of the encoding/json form of an
// APIGroupDiscoveryList holding only the items (no kind, no apiVersion), which is what it
// hashes; so the same document has the same ETag from either server.
func Encode(l *apidiscoveryv2.APIGroupDiscoveryList) (data []byte, etag string, err error) {
	data, err = json.Marshal(l)
	if err != nil {
		return nil, "", fmt.Errorf("encoding aggregated discovery: %w", err)
	}
	hashed, err := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{Items: l.Items})
	if err != nil {
		return nil, "", fmt.Errorf("encoding aggregated discovery: %w", err)
	}
	return data, strconv.Quote(fmt.Sprintf("%X", sha512.Sum512(hashed))), nil
}

// protobufCodec encodes aggregated discovery v2 as kube-apiserver does for protobuf
// clients: apimachinery's protobuf serializer (the "k8s\x00" envelope holding the list).
var protobufCodec = func() runtime.Serializer {
	scheme := runtime.NewScheme()
	utilruntime.Must(apidiscoveryv2.AddToScheme(scheme))
	return protobuf.NewSerializer(scheme, scheme)
}()

// EncodeProtobuf returns l in the protobuf form of AcceptAggregatedProtobuf. Its ETag is
// Encode's: kube-apiserver hashes the document, not one of its encodings, so both forms
// of one document carry the same ETag.
func EncodeProtobuf(l *apidiscoveryv2.APIGroupDiscoveryList) ([]byte, error) {
	typed := l.DeepCopy()
	typed.Kind, typed.APIVersion = listKind, listGroup+"/"+listVersion
	var b bytes.Buffer
	if err := protobufCodec.Encode(typed, &b); err != nil {
		return nil, fmt.Errorf("encoding aggregated discovery as protobuf: %w", err)
	}
	return b.Bytes(), nil
}

// DecodeProtobuf reads the protobuf form of an aggregated discovery v2 document.
func DecodeProtobuf(data []byte) (*apidiscoveryv2.APIGroupDiscoveryList, error) {
	var l apidiscoveryv2.APIGroupDiscoveryList
	if _, _, err := protobufCodec.Decode(data, nil, &l); err != nil {
		return nil, fmt.Errorf("decoding aggregated discovery from protobuf: %w", err)
	}
	return &l, nil
}

// NewList returns an aggregated discovery v2 document of items, with its kind and
// apiVersion set.
func NewList(items ...apidiscoveryv2.APIGroupDiscovery) *apidiscoveryv2.APIGroupDiscoveryList {
	l := &apidiscoveryv2.APIGroupDiscoveryList{Items: items}
	l.Kind, l.APIVersion = listKind, listGroup+"/"+listVersion
	return l
}
