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
		{discovery.AcceptAggregated + ",application/json", discovery.Merged},
		// client-go 1.30 to 1.36
		{discovery.AcceptAggregated + ",application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", discovery.Merged},
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
		{"application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList", discovery.PassThrough},
		{"application/vnd.kubernetes.protobuf", discovery.PassThrough},
		{"application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList", discovery.PassThrough},
		{"text/html, " + discovery.AcceptAggregated, discovery.Merged},
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
