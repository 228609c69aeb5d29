package discovery_test

import (
	"strings"
	"testing"

	"github.com/kplug/kplug/mvproxy/discovery"
)

func TestNegotiate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		accept string
		want   discovery.Answer
	}{
		{"", discovery.PassThrough},
		{"application/json", discovery.PassThrough},
		{"application/json;foo=bar", discovery.PassThrough},
		{discovery.AcceptAggregated, discovery.Merged},
		// client-go 1.37 and later (kubernetes/kubernetes#138271: v2 only)
		{discovery.AcceptAggregated + ",application/json", discovery.Merged},
		{discovery.AcceptNoPeer, discovery.Local},
		// only nopeer: kube-apiserver merges for any other profile, the KEP's "local" too
		{discovery.AcceptAggregated + ";profile=local", discovery.Merged},
		{discovery.AcceptAggregated + ";profile=foo", discovery.Merged},
		// the apiserver's own loopback client
		{discovery.AcceptNoPeer + "," + discovery.AcceptAggregated + ",application/json", discovery.Local},
		// spaces and quality, as in the KEP's example
		{"application/json; q=0.5, application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList; q=0.9", discovery.Merged},
		{"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0, application/json", discovery.PassThrough},
		// a client that prefers protobuf
		{"application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList," + discovery.AcceptAggregated, discovery.MergedProtobuf},
		{discovery.AcceptAggregatedProtobuf + ";profile=nopeer," + discovery.AcceptNoPeer, discovery.LocalProtobuf},
		{"application/vnd.kubernetes.protobuf", discovery.PassThrough},
		{"application/yaml;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", discovery.PassThrough},
		{"text/html, " + discovery.AcceptAggregated, discovery.Merged},
	}
	for _, tt := range tests {
		if got, err := discovery.Negotiate(tt.accept); got != tt.want || err != nil {
			t.Errorf("Negotiate(%q) = %v, %v; want %v", tt.accept, got, err, tt.want)
		}
	}
}

// TestNegotiateV2beta1 (issue 28): aggregated discovery v2beta1 is not acceptable, as to
// kube-apiserver 1.35 and later, which serve it no more (1.38 removed it): such a clause is
// passed over for the next. kplug took the first aggregated clause of any version as the
// local server's to answer, so a client listing v2beta1 before v2 got the local server's
// own v2 document from 1.35 on, without the groups only peers serve.
func TestNegotiateV2beta1(t *testing.T) {
	t.Parallel()
	const (
		v2beta1         = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
		v2beta1Protobuf = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
	)
	tests := []struct {
		accept string
		want   discovery.Answer
	}{
		{v2beta1 + "," + discovery.AcceptAggregated, discovery.Merged},
		{v2beta1Protobuf + "," + discovery.AcceptAggregatedProtobuf, discovery.MergedProtobuf},
		{v2beta1 + "," + discovery.AcceptNoPeer, discovery.Local},
		{"application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList," + discovery.AcceptAggregated, discovery.Merged},
		// client-go 1.30 to 1.36: v2 first decides
		{discovery.AcceptAggregated + "," + v2beta1 + ",application/json", discovery.Merged},
		// nothing else acceptable but legacy discovery, or nothing at all: the local
		// server answers (legacy JSON; 406)
		{v2beta1 + ",application/json", discovery.PassThrough},
		{v2beta1, discovery.PassThrough},
		{v2beta1Protobuf, discovery.PassThrough},
	}
	for _, tt := range tests {
		if got, err := discovery.Negotiate(tt.accept); got != tt.want || err != nil {
			t.Errorf("Negotiate(%q) = %v, %v; want %v", tt.accept, got, err, tt.want)
		}
	}
}

// FuzzNegotiate: any Accept header is answered without panic; within the bounds,
// a leading aggregated clause of quality 1 decides, whatever follows.
func FuzzNegotiate(f *testing.F) {
	for _, seed := range []string{
		"", "application/json", discovery.AcceptAggregated + ",application/json", discovery.AcceptNoPeer,
		"application/json; q=0.5, application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList; q=0.9",
		"application/json;q=2,text/html;q=NaN", strings.Repeat("a/b,", 40), ";;,=;q",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		_, err := discovery.Negotiate(accept)
		within := len(accept) <= discovery.MaxAcceptBytes && strings.Count(accept, ",")+1 <= discovery.MaxMediaRanges
		if (err == nil) != within {
			t.Fatalf("%d bytes, %d ranges: error %v", len(accept), strings.Count(accept, ",")+1, err)
		}
		for prefix, want := range map[string]discovery.Answer{discovery.AcceptNoPeer: discovery.Local, discovery.AcceptAggregated: discovery.Merged} {
			h := prefix + "," + accept
			got, err := discovery.Negotiate(h)
			if len(h) > discovery.MaxAcceptBytes || strings.Count(h, ",")+1 > discovery.MaxMediaRanges {
				if err == nil {
					t.Fatalf("%q over the bounds accepted", h)
				}
				continue
			}
			if got != want || err != nil {
				t.Fatalf("Negotiate(%q) = %v, %v; want %v", h, got, err, want)
			}
		}
	})
}
