package execcred

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/httpsigtest"
)

// awsLadder is the AWS-style ladder of KEP-6308's cloud provider example, as a kubeconfig
// states it.
const awsLadder = `{"kind":"hmac-ladder","hash":"sha-256","secretPrefix":"AWS4","steps":[
	{"name":"date","date":"YYYYMMDD"},{"name":"region","scope":true},{"name":"service","scope":true},
	{"name":"terminator","literal":"aws4_request"}]}`

const awsSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

// derivedKeys are the keys a resolver would derive for the access key, today and
// tomorrow (a test may cross midnight UTC), by keyid.
func derivedKeys(t *testing.T, scope map[string]string) map[string]any {
	t.Helper()
	var kd struct{ httpsig.Ladder }
	if err := json.Unmarshal([]byte(awsLadder), &kd.Ladder); err != nil {
		t.Fatal(err)
	}
	keys := map[string]any{}
	for _, at := range []time.Time{time.Now(), time.Now().Add(24 * time.Hour)} {
		key, id, err := kd.Derive("AKIDEXAMPLE", []byte(awsSecret), at, scope)
		if err != nil {
			t.Fatal(err)
		}
		keys[id] = key
	}
	return keys
}

// TestHTTPSignaturePluginDerivedKey: a kubeconfig states an AWS-style ladder, the plugin
// is told it (spec.httpSignature.keyDerivation) and returns the root secret and the scope
// values, or a rung and its place on the ladder; every request is signed with the key
// derived for its own created time, under the SigV4 credential scope as keyid, and the
// verifier, holding only the derived keys, accepts it.
func TestHTTPSignaturePluginDerivedKey(t *testing.T) {
	t.Parallel()
	scope := map[string]string{"region": "us-west-2", "service": "eks"}
	srv := httpsigtest.New(t, testAudience, derivedKeys(t, scope))
	day := time.Now().UTC().Format("20060102")
	rung := []byte("AWS4" + awsSecret)
	for _, v := range []string{day, "us-west-2"} {
		m := hmac.New(sha256.New, rung)
		m.Write([]byte(v))
		rung = m.Sum(nil)
	}
	for _, tc := range []struct {
		name   string
		answer map[string]any
	}{
		{"root secret", map[string]any{"keyID": "AKIDEXAMPLE", "secret": awsSecret, "stage": map[string]any{"scope": scope}}},
		{"rung after region", map[string]any{"keyID": "AKIDEXAMPLE", "secretBase64": rung, "stage": map[string]any{"from": "region", "scope": scope}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.answer["signedHeaders"] = map[string]string{httpsig.AudienceHeader: testAudience}
			p, cfg := signingPlugin(t, srv.URL, signingOutput(t, tc.answer, time.Now().Add(time.Hour)))
			block := pluginBlock()
			block.KeyDerivation = json.RawMessage(awsLadder)
			getAndPost(t, signingTransport(t, cfg, block, Options{Plugin: quietHost()}), srv.URL)
			calls := p.Calls()
			if len(calls) != 1 || !strings.Contains(calls[0].Info, `"keyDerivation":{"kind":"hmac-ladder","hash":"sha-256","secretPrefix":"AWS4"`) {
				t.Errorf("the plugin was not told the ladder: %+v", calls)
			}
		})
	}
	for _, r := range srv.Requests() {
		if r.Err != "" || !strings.HasPrefix(r.KeyID, "AKIDEXAMPLE/") || !strings.HasSuffix(r.KeyID, "/us-west-2/eks/aws4_request") {
			t.Errorf("%s: keyid %q, refused: %s", r.Method, r.KeyID, r.Err)
		}
	}
}

// TestHTTPSignatureDerivationErrors: what a client with or without a ladder refuses.
func TestHTTPSignatureDerivationErrors(t *testing.T) {
	t.Parallel()
	srv := httpsigtest.New(t, testAudience, nil)
	aud := map[string]string{httpsig.AudienceHeader: testAudience}
	for _, tc := range []struct {
		name   string
		ladder string
		answer map[string]any
		want   string
	}{
		{"stage without a ladder", "", map[string]any{"keyID": "k", "secret": awsSecret, "stage": map[string]any{"scope": map[string]string{"region": "r"}}, "signedHeaders": aud},
			"states no keyDerivation to place the secret on"},
		{"missing scope value", awsLadder, map[string]any{"keyID": "k", "secret": awsSecret, "stage": map[string]any{"scope": map[string]string{"region": "r"}}, "signedHeaders": aud},
			`no value for scope step "service"`},
		{"unknown stage step", awsLadder, map[string]any{"keyID": "k", "secret": awsSecret, "stage": map[string]any{"from": "zone", "scope": map[string]string{"region": "r", "service": "s"}}, "signedHeaders": aud},
			`stage.from "zone" is not a step`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, cfg := signingPlugin(t, srv.URL, signingOutput(t, tc.answer, time.Time{}))
			block := pluginBlock()
			if tc.ladder != "" {
				block.KeyDerivation = json.RawMessage(tc.ladder)
			}
			src, err := newHTTPSignatureSource(cfg, block, Options{Plugin: quietHost()})
			if err != nil {
				t.Fatal(err)
			}
			_, err = src.Credential(t.Context(), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), awsSecret) {
				t.Errorf("Credential = %v, want %q", err, tc.want)
			}
		})
	}
	// A ladder that does not validate, or goes with key files, is a configuration error.
	for _, tc := range []struct {
		block *HTTPSignature
		want  string
	}{
		{&HTTPSignature{APIVersion: HTTPSignatureAPIVersion, KeyDerivation: json.RawMessage(`{"kind":"hmac-ladder","hash":"md5","steps":[]}`)}, `httpSignature.keyDerivation.hash "md5"`},
		{&HTTPSignature{APIVersion: HTTPSignatureAPIVersion, KeyDerivation: json.RawMessage(`{"kind":"hmac-ladder","hash":"sha-256","stepz":[]}`)}, `unknown field "stepz"`},
		{&HTTPSignature{APIVersion: HTTPSignatureAPIVersion, CertFile: "c", KeyFile: "k", KeyDerivation: json.RawMessage(awsLadder)}, "does not go with certFile"},
	} {
		if err := tc.block.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want %q", err, tc.want)
		}
	}
}

// TestLadderOfCopiesEveryField guards ladderOf, which copies field by field: a field added
// to the wire form and not copied would derive another key without an error.
func TestLadderOfCopiesEveryField(t *testing.T) {
	t.Parallel()
	kd := wire.KeyDerivation{Kind: "hmac-ladder", Hash: "sha-512", SecretPrefix: "P", Steps: []wire.KeyDerivationStep{
		{Name: "a", Date: "YYYY-MM-DD"}, {Name: "b", Scope: true}, {Name: "c", Literal: "l"},
	}}
	got, _ := json.Marshal(ladderOf(&kd))
	want, _ := json.Marshal(kd)
	if string(got) != string(want) {
		t.Errorf("ladderOf dropped or changed a field:\n got %s\nwant %s", got, want)
	}
	if n, m := reflect.TypeFor[wire.KeyDerivation]().NumField(), reflect.TypeFor[wire.KeyDerivationStep]().NumField(); n != 4 || m != 4 {
		t.Errorf("wire.KeyDerivation has %d fields and its step %d: copy the new ones in ladderOf and set them above", n, m)
	}
}
