package discovery

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Answer is what a GET /apis asks for, by its Accept header.
type Answer int

const (
	// PassThrough is legacy discovery, aggregated discovery v2 in another encoding, or
	// anything else: the local server answers.
	PassThrough Answer = iota
	// Merged is aggregated discovery v2 as JSON with the default profile: the
	// peer-aggregated document.
	Merged
	// Local is aggregated discovery v2 as JSON with profile=nopeer: the local server's own
	// document. Any other profile, the KEP's "local" included, gets the merged document,
	// as from kube-apiserver.
	Local
	// MergedProtobuf is Merged encoded as protobuf (AcceptAggregatedProtobuf), which
	// kube-apiserver also serves. client-go's discovery client (v0.36) asks for JSON only,
	// whatever its content type, so kubectl and the controllers do not ask for it.
	MergedProtobuf
	// LocalProtobuf is Local encoded as protobuf; the local server answers.
	LocalProtobuf
)

func (a Answer) String() string {
	switch a {
	case PassThrough:
		return "pass-through"
	case Merged:
		return "merged"
	case Local:
		return "local"
	case MergedProtobuf:
		return "merged-protobuf"
	case LocalProtobuf:
		return "local-protobuf"
	}
	return "unknown"
}

// An Accept header on /apis is read only up to these bounds, which real clients stay far
// below (client-go sends three media ranges in about 200 bytes): the negotiation of an
// anonymous request must cost little.
const (
	MaxAcceptBytes = 4096
	MaxMediaRanges = 32
)

// Negotiate picks, like kube-apiserver, the first acceptable Accept clause in order of
// quality. Aggregated discovery v2 is merged in JSON and in protobuf. Other versions of
// aggregated discovery are not acceptable, as to kube-apiserver 1.35 and later: v2beta1,
// which 1.35 stopped serving (AggregatedDiscoveryRemoveBetaType locked on) and 1.38
// removed (kubernetes/kubernetes#141208). Such a clause is passed over for the next, so
// that a client listing v2beta1 before v2 gets the merged document, and a client asking
// for nothing else gets whatever the local server answers (1.35 and later: 406). It
// refuses a header over MaxAcceptBytes or MaxMediaRanges before parsing it.
func Negotiate(accept string) (Answer, error) {
	if n := strings.Count(accept, ",") + 1; len(accept) > MaxAcceptBytes || n > MaxMediaRanges {
		return PassThrough, fmt.Errorf("the Accept header has %d bytes and %d media ranges, more than the %d bytes and %d media ranges read; send fewer media ranges",
			len(accept), n, MaxAcceptBytes, MaxMediaRanges)
	}
	for _, c := range parseAccept(accept) {
		aggregated := c.params["g"] == listGroup && c.params["as"] == listKind
		switch {
		case aggregated && c.params["v"] == listVersion && (c.mediaType == "application/json" || c.mediaType == protobufMediaType):
			nopeer := c.params["profile"] == "nopeer"
			switch {
			case c.mediaType == protobufMediaType && nopeer:
				return LocalProtobuf, nil
			case c.mediaType == protobufMediaType:
				return MergedProtobuf, nil
			case nopeer:
				return Local, nil
			}
			return Merged, nil
		case aggregated && c.params["v"] != listVersion:
			continue // v2beta1, or a version no server serves: not acceptable
		case aggregated:
			// v2 in another encoding: the local server decides whether it serves it
			return PassThrough, nil
		case c.mediaType == "application/json", c.mediaType == "*/*", c.mediaType == "application/*",
			c.mediaType == "application/yaml", c.mediaType == protobufMediaType:
			return PassThrough, nil
		}
	}
	return PassThrough, nil
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
