package execcred

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kplug/kplug/execcred/plugin"
	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/httpsigtest"
)

// TestFuncSource: a plugin function in-process is told what a client would tell it (the 401
// on a refresh included), and its answer is checked as a client checks a plugin's output.
func TestFuncSource(t *testing.T) {
	t.Parallel()
	var seen []*plugin.Info
	answer := &Status{Token: "t"}
	src := FuncSource(func(_ context.Context, info *plugin.Info) (*Status, error) {
		seen = append(seen, info)
		return answer, nil
	}, plugin.Info{Cluster: &Cluster{Server: "https://k"}})
	ctx := t.Context()
	first, err := src.Credential(ctx, nil)
	if err != nil || first.Token != "t" {
		t.Fatalf("first: %v, %v", first, err)
	}
	rejected := &Response{Code: 401}
	if _, err := src.Credential(ctx, &Rejection{Credential: first, Response: rejected}); err != nil {
		t.Fatal(err)
	}
	want := []*plugin.Info{
		{APIVersion: V1, Cluster: &Cluster{Server: "https://k"}, FromClient: true},
		{APIVersion: V1, Cluster: &Cluster{Server: "https://k"}, Response: rejected, FromClient: true},
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("the function was told (-want +got):\n%s", diff)
	}
	for _, bad := range []struct {
		status *Status
		err    string
	}{
		{nil, "plugin: the plugin function returned no credential"},
		{&Status{}, "plugin: exec plugin didn't return a token or cert/key pair"},
		{&Status{ClientCertificateData: "x"}, "plugin: exec plugin returned only certificate or key, not both"},
	} {
		answer = bad.status
		if _, err := src.Credential(ctx, nil); err == nil || err.Error() != bad.err {
			t.Errorf("answer %+v: %v, want %s", bad.status, err, bad.err)
		}
	}
}

// TestFuncSourceDerivedKey: a function told a ladder (spec.httpSignature.keyDerivation)
// answers a root secret and its scope; every request is signed with the key derived for
// its own date, which a verifier holding only the derived keys accepts.
func TestFuncSourceDerivedKey(t *testing.T) {
	t.Parallel()
	scope := map[string]string{"region": "us-west-2", "service": "eks"}
	srv := httpsigtest.New(t, testAudience, derivedKeys(t, scope))
	var kd wire.KeyDerivation
	if err := json.Unmarshal([]byte(awsLadder), &kd); err != nil {
		t.Fatal(err)
	}
	src := FuncSource(func(_ context.Context, info *plugin.Info) (*Status, error) {
		if info.HTTPSignature == nil || info.HTTPSignature.KeyDerivation == nil {
			return nil, errors.New("not told the ladder")
		}
		return &Status{HTTPSignature: &wire.HTTPSignature{KeyID: "AKIDEXAMPLE", Secret: awsSecret,
			Stage:         json.RawMessage(`{"scope":{"region":"us-west-2","service":"eks"}}`),
			SignedHeaders: map[string]string{httpsig.AudienceHeader: testAudience}}}, nil
	}, plugin.Info{HTTPSignature: &wire.HTTPSignatureRequest{Algorithm: "hmac-sha256", KeyDerivation: &kd}})
	cred, err := src.Credential(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/api", nil)
	resp, err := (&http.Client{Transport: cred.HTTPSignature.RoundTripper(http.DefaultTransport)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	for _, r := range srv.Requests() {
		if r.Err != "" || !strings.HasSuffix(r.KeyID, "/us-west-2/eks/aws4_request") {
			t.Errorf("keyid %q, refused: %s", r.KeyID, r.Err)
		}
	}
}

func TestClusterConfig(t *testing.T) {
	t.Parallel()
	info := &plugin.Info{Cluster: &Cluster{Server: "https://k:6443", TLSServerName: "sni", CertificateAuthorityData: []byte("CA"), ProxyURL: "http://127.0.0.1:3128"}}
	cfg, err := ClusterConfig(info)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://k:6443" || cfg.ServerName != "sni" || string(cfg.CAData) != "CA" || cfg.Proxy == nil {
		t.Errorf("config %+v", cfg)
	}
	if _, err := ClusterConfig(&plugin.Info{APIVersion: V1}); err == nil {
		t.Error("ClusterConfig without cluster info succeeded")
	}
}
