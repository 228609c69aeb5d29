package mvproxy

import (
	"cmp"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

// Discovery media types and the header of the one-hop guard.
const (
	// AcceptAggregated asks for the aggregated discovery document, v2, as JSON.
	AcceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	// AcceptNoPeer asks for the server's own aggregated discovery document, not merged
	// with its peers'. Servers before 1.35 ignore the profile and answer with their own
	// document anyway.
	AcceptNoPeer = AcceptAggregated + ";profile=nopeer"

	discoveryGroup   = "apidiscovery.k8s.io"
	discoveryVersion = "v2"
	discoveryList    = "APIGroupDiscoveryList"
)

// Document is one server's aggregated discovery: the /apis document (Groups) and the /api
// document (Core), and the resources they list.
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
						d.served[gvr.withSubresource(s.Subresource)] = struct{}{}
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

// ParseDiscovery decodes an aggregated discovery v2 JSON document and checks what routing
// and merging rely on: the kind and apiVersion, a name for every version and resource,
// and no group, version or resource listed twice.
func ParseDiscovery(data []byte) (*apidiscoveryv2.APIGroupDiscoveryList, error) {
	var l apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("decoding aggregated discovery: %w", err)
	}
	if l.Kind != discoveryList || l.APIVersion != discoveryGroup+"/"+discoveryVersion {
		return nil, fmt.Errorf("decoding aggregated discovery: got kind %q apiVersion %q, want %s %s/%s",
			l.Kind, l.APIVersion, discoveryList, discoveryGroup, discoveryVersion)
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

// encodeDiscovery returns the JSON document and its ETag, computed exactly as
// kube-apiserver computes it: the quoted, upper-case hex SHA-512 of the encoding/json
// form of an APIGroupDiscoveryList holding only the items (no kind, no apiVersion), which
// is what it hashes; so the same document has the same ETag from either server.
func encodeDiscovery(l *apidiscoveryv2.APIGroupDiscoveryList) ([]byte, string, error) {
	data, err := json.Marshal(l)
	if err != nil {
		return nil, "", fmt.Errorf("encoding aggregated discovery: %w", err)
	}
	hashed, err := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{Items: l.Items})
	if err != nil {
		return nil, "", fmt.Errorf("encoding aggregated discovery: %w", err)
	}
	return data, strconv.Quote(fmt.Sprintf("%X", sha512.Sum512(hashed))), nil
}

// discoveryAnswer is what a GET /apis asks for.
type discoveryAnswer int

const (
	answerPassThrough discoveryAnswer = iota // legacy, protobuf, or anything else: the local handler answers
	answerMerged                             // aggregated v2 JSON, default profile: the peer-aggregated document
	answerLocal                              // aggregated v2 JSON with profile=nopeer or profile=local
)

// An Accept header on /apis is read only up to these bounds, which real clients stay far
// below (client-go sends three media ranges in about 200 bytes): the negotiation of an
// anonymous request must cost little.
const (
	maxAcceptBytes = 4096
	maxMediaRanges = 32
)

// negotiateDiscovery picks, like kube-apiserver, the first acceptable Accept clause in
// order of quality. Only JSON is merged; other aggregated encodings are left to the local
// handler. It refuses a header over maxAcceptBytes or maxMediaRanges before parsing it.
func negotiateDiscovery(accept string) (discoveryAnswer, error) {
	if n := strings.Count(accept, ",") + 1; len(accept) > maxAcceptBytes || n > maxMediaRanges {
		return answerPassThrough, fmt.Errorf("mvproxy: the Accept header has %d bytes and %d media ranges, more than the %d bytes and %d media ranges read; send fewer media ranges",
			len(accept), n, maxAcceptBytes, maxMediaRanges)
	}
	for _, c := range parseAccept(accept) {
		aggregated := c.params["g"] == discoveryGroup && c.params["as"] == discoveryList
		switch {
		case aggregated && c.params["v"] == discoveryVersion && c.mediaType == "application/json":
			switch c.params["profile"] {
			case "nopeer", "local":
				return answerLocal, nil
			}
			return answerMerged, nil
		case aggregated:
			// another version or encoding of aggregated discovery: the local handler
			// decides whether it serves it
			return answerPassThrough, nil
		case c.mediaType == "application/json", c.mediaType == "*/*", c.mediaType == "application/*",
			c.mediaType == "application/yaml", c.mediaType == "application/vnd.kubernetes.protobuf":
			return answerPassThrough, nil
		}
	}
	return answerPassThrough, nil
}

type acceptClause struct {
	mediaType string
	params    map[string]string
	q         float64
}

// parseAccept splits an Accept header into clauses, sorted by decreasing quality (stable,
// so equal qualities keep the client's order), dropping clauses with q=0 or a quality
// that is no number from 0 to 1.
func parseAccept(accept string) []acceptClause {
	var out []acceptClause
	for raw := range strings.SplitSeq(accept, ",") {
		fields := strings.Split(raw, ";")
		c := acceptClause{mediaType: strings.ToLower(strings.TrimSpace(fields[0])), params: map[string]string{}, q: 1}
		if c.mediaType == "" {
			continue
		}
		for _, p := range fields[1:] {
			k, v, _ := strings.Cut(p, "=")
			k, v = strings.ToLower(strings.TrimSpace(k)), strings.Trim(strings.TrimSpace(v), `"`)
			if k == "q" {
				q, err := strconv.ParseFloat(v, 64)
				if err != nil || !(q >= 0 && q <= 1) {
					q = 0
				}
				c.q = q
				continue
			}
			c.params[k] = v
		}
		if c.q > 0 {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b acceptClause) int { return cmp.Compare(b.q, a.q) })
	return out
}

// errNotSynced is returned while the caches have not been filled once.
var errNotSynced = errors.New("mvproxy: discovery caches have not synced yet")

type apiGroupList = apidiscoveryv2.APIGroupDiscoveryList
