package httpsig

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

var sigV4Ladder = SigV4Ladder()

// AWS's published example secret access key, used by its SigV4 documentation and test
// suite.
const awsExampleSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

// TestLadderSigV4Vectors derives AWS's published SigV4 examples with the ladder: the
// signing key of the "derive a signing key" example, and the signature of the test
// suite's get-vanilla request over its published string to sign.
func TestLadderSigV4Vectors(t *testing.T) {
	t.Parallel()
	created := time.Date(2015, 8, 30, 12, 36, 0, 0, time.UTC)

	key, keyID, err := sigV4Ladder.Derive("AKIDEXAMPLE", []byte(awsExampleSecret), created, map[string]string{"region": "us-east-1", "service": "iam"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(key), "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"; got != want {
		t.Errorf("signing key = %s, want %s (AWS's derivation example)", got, want)
	}
	if want := "AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request"; keyID != want {
		t.Errorf("key ID = %q, want %q (SigV4's credential scope)", keyID, want)
	}

	key, _, err = sigV4Ladder.Derive("AKIDEXAMPLE", []byte(awsExampleSecret), created, map[string]string{"region": "us-east-1", "service": "service"})
	if err != nil {
		t.Fatal(err)
	}
	stringToSign := strings.Join([]string{
		"AWS4-HMAC-SHA256",
		"20150830T123600Z",
		"20150830/us-east-1/service/aws4_request",
		"bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
	}, "\n")
	m := hmac.New(sha256.New, key)
	m.Write([]byte(stringToSign))
	if got, want := hex.EncodeToString(m.Sum(nil)), "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"; got != want {
		t.Errorf("get-vanilla signature = %s, want %s (the SigV4 test suite)", got, want)
	}
}

// TestLadderDeriveFrom: a plugin that returns an intermediate rung instead of the root
// secret makes the same key, and the same key ID, as one that returns the secret.
func TestLadderDeriveFrom(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 3, 15, 23, 59, 59, 0, time.UTC)
	scope := map[string]string{"region": "us-west-2", "service": "eks"}
	whole, wholeID, err := sigV4Ladder.Derive("ASIAIOSFODNN7EXAMPLE", []byte(awsExampleSecret), created, scope)
	if err != nil {
		t.Fatal(err)
	}
	// The rung after the region step, as a plugin would fold it.
	rung := []byte("AWS4" + awsExampleSecret)
	for _, v := range []string{"20260315", "us-west-2"} {
		m := hmac.New(sha256.New, rung)
		m.Write([]byte(v))
		rung = m.Sum(nil)
	}
	part, partID, err := sigV4Ladder.DeriveFrom("ASIAIOSFODNN7EXAMPLE", rung, "region", created, scope)
	if err != nil {
		t.Fatal(err)
	}
	if !hmac.Equal(whole, part) || wholeID != partID || wholeID != "ASIAIOSFODNN7EXAMPLE/20260315/us-west-2/eks/aws4_request" {
		t.Errorf("DeriveFrom = %x %q, want %x %q", part, partID, whole, wholeID)
	}
	// One second later it is another day: another key, another key ID.
	next, nextID, err := sigV4Ladder.Derive("ASIAIOSFODNN7EXAMPLE", []byte(awsExampleSecret), created.Add(time.Second), scope)
	if err != nil {
		t.Fatal(err)
	}
	if hmac.Equal(next, whole) || nextID != "ASIAIOSFODNN7EXAMPLE/20260316/us-west-2/eks/aws4_request" {
		t.Errorf("across midnight: %x %q", next, nextID)
	}
	// The dashed date form renders the same day differently.
	dashed := sigV4Ladder
	dashed.Steps = append([]LadderStep{{Name: "date", Date: LadderDateDashed}}, sigV4Ladder.Steps[1:]...)
	if _, id, err := dashed.Derive("n", []byte("s"), created, scope); err != nil || id != "n/2026-03-15/us-west-2/eks/aws4_request" {
		t.Errorf("dashed date: %q, %v", id, err)
	}
}

func TestLadderRefusals(t *testing.T) {
	t.Parallel()
	created := time.Unix(0, 0)
	step := func(s ...LadderStep) Ladder { return Ladder{Kind: LadderKind, Hash: "sha-256", Steps: s} }
	for _, tc := range []struct {
		l     Ladder
		name  string
		scope map[string]string
		from  string
		want  string
	}{
		{Ladder{Kind: "pbkdf2", Hash: "sha-256"}, "n", nil, "", `keyDerivation.kind "pbkdf2": want "hmac-ladder"`},
		{Ladder{Kind: LadderKind, Hash: "sha-1", Steps: sigV4Ladder.Steps}, "n", nil, "", `keyDerivation.hash "sha-1": want sha-256 or sha-512`},
		{step(), "n", nil, "", "a ladder needs at least one step"},
		{step(LadderStep{Name: "d", Date: "DD/MM/YYYY"}), "n", nil, "", `date "DD/MM/YYYY": want YYYYMMDD or YYYY-MM-DD`},
		{step(LadderStep{Name: "x", Scope: true, Literal: "l"}), "n", nil, "", "give exactly one of date, scope and literal"},
		{step(LadderStep{Name: "x", Literal: "a"}, LadderStep{Name: "x", Literal: "b"}), "n", nil, "", `step name "x" used twice`},
		{sigV4Ladder, "n", map[string]string{"region": "r"}, "", `no value for scope step "service"`},
		{sigV4Ladder, "n", map[string]string{"region": "r", "service": "s", "account": "a"}, "", `"account" is not a scope step`},
		{sigV4Ladder, "n", map[string]string{"region": "r/x", "service": "s"}, "", `scope step "region": a value may not contain "/"`},
		{sigV4Ladder, "a/b", map[string]string{"region": "r", "service": "s"}, "", `key ID name "a/b"`},
		{sigV4Ladder, "n", map[string]string{"region": "r", "service": "s"}, "zone", `stage.from "zone" is not a step`},
	} {
		var err error
		if tc.from != "" {
			_, _, err = tc.l.DeriveFrom(tc.name, []byte("k"), tc.from, created, tc.scope)
		} else {
			_, _, err = tc.l.Derive(tc.name, []byte("k"), created, tc.scope)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.l, err, tc.want)
		}
	}
}

// TestSignWithDerivedKey signs with an AWS-style ladder from the root secret and from a
// rung, on both sides of midnight UTC, and verifies as a resolver would: it splits the
// keyid into the name and the ladder's inputs, derives from its own copy of the secret
// for the signature's created, and refuses a keyid whose inputs are not the ones it
// derives (another date, another region).
func TestSignWithDerivedKey(t *testing.T) {
	t.Parallel()
	scope := map[string]string{"region": "us-west-2", "service": "eks"}
	rung := []byte("AWS4" + awsExampleSecret)
	for _, v := range []string{"20260315", "us-west-2"} {
		m := hmac.New(sha256.New, rung)
		m.Write([]byte(v))
		rung = m.Sum(nil)
	}
	resolve := func(sig *Signature) (any, error) {
		name, _, _ := strings.Cut(sig.KeyID, "/")
		if name != "ASIAIOSFODNN7EXAMPLE" {
			return nil, errors.New("unknown key")
		}
		key, want, err := sigV4Ladder.Derive(name, []byte(awsExampleSecret), sig.Created, scope)
		if err != nil {
			return nil, err
		}
		if sig.KeyID != want {
			return nil, fmt.Errorf("keyid %q does not match the derivation %q", sig.KeyID, want)
		}
		return key, nil
	}
	for _, tc := range []struct {
		name string
		now  time.Time
		d    Derivation
		ok   bool
	}{
		{"root", time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC), Derivation{Ladder: sigV4Ladder, Name: "ASIAIOSFODNN7EXAMPLE", Scope: scope}, true},
		{"root, one second to midnight", time.Date(2026, 3, 15, 23, 59, 59, 900e6, time.UTC), Derivation{Ladder: sigV4Ladder, Name: "ASIAIOSFODNN7EXAMPLE", Scope: scope}, true},
		{"root, next day", time.Date(2026, 3, 16, 0, 0, 0, 0, time.UTC), Derivation{Ladder: sigV4Ladder, Name: "ASIAIOSFODNN7EXAMPLE", Scope: scope}, true},
		{"rung for the day", time.Date(2026, 3, 15, 8, 0, 0, 0, time.UTC), Derivation{Ladder: sigV4Ladder, Name: "ASIAIOSFODNN7EXAMPLE", From: "region", Scope: scope}, true},
		// A rung for 2026-03-15 signing on the 16th claims the 16th and derives the
		// wrong key: refused.
		{"rung past its day", time.Date(2026, 3, 16, 8, 0, 0, 0, time.UTC), Derivation{Ladder: sigV4Ladder, Name: "ASIAIOSFODNN7EXAMPLE", From: "region", Scope: scope}, false},
		{"another region", time.Date(2026, 3, 15, 8, 0, 0, 0, time.UTC), Derivation{Ladder: sigV4Ladder, Name: "ASIAIOSFODNN7EXAMPLE", Scope: map[string]string{"region": "eu-west-1", "service": "eks"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			secret := []byte(awsExampleSecret)
			if tc.d.From != "" {
				secret = rung
			}
			now := func() time.Time { return tc.now }
			s, err := NewSigner(SignerOptions{Key: Key{Secret: secret, Derivation: &tc.d}, Headers: map[string]string{AudienceHeader: audience}, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			req := testRequest(http.MethodGet, "/api/v1/namespaces", "")
			if err := s.Sign(req); err != nil {
				t.Fatal(err)
			}
			p := testPolicy()
			p.Now = now
			sig, err := Verify(req, p, resolve)
			if tc.ok && (err != nil || !strings.HasPrefix(sig.KeyID, "ASIAIOSFODNN7EXAMPLE/"+tc.now.UTC().Format("20060102")+"/")) {
				t.Errorf("Verify = %+v, %v", sig, err)
			}
			if !tc.ok && err == nil {
				t.Errorf("Verify accepted %q", sig.KeyID)
			}
		})
	}
}

func TestDerivationRefusals(t *testing.T) {
	t.Parallel()
	aud := map[string]string{AudienceHeader: audience}
	d := &Derivation{Ladder: sigV4Ladder, Name: "n", Scope: map[string]string{"region": "r", "service": "s"}}
	for _, tc := range []struct {
		key  Key
		want string
	}{
		{Key{Derivation: d}, "a key derivation needs a secret"},
		{Key{Secret: []byte("s"), KeyID: "k", Derivation: d}, "leave KeyID empty"},
		{Key{Secret: []byte("s"), Derivation: &Derivation{Ladder: sigV4Ladder, Name: "n"}}, `no value for scope step "region"`},
	} {
		if _, err := NewSigner(SignerOptions{Key: tc.key, Headers: aud}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.key, err, tc.want)
		}
	}
}

// TestLadderRung: a rung handed out at a step, folded the rest of the way, is the key the
// root derives; a rung cannot be asked for before its start.
func TestLadderRung(t *testing.T) {
	l := SigV4Ladder()
	created := time.Date(2015, 8, 30, 12, 0, 0, 0, time.UTC)
	scope := map[string]string{"region": "us-east-1", "service": "iam"}
	secret := []byte("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
	want, wantID, err := l.Derive("AKIDEXAMPLE", secret, created, scope)
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"date", "region", "service", "terminator"} {
		rung, err := l.Rung(secret, "", to, created, scope)
		if err != nil {
			t.Fatal(err)
		}
		if to == "terminator" {
			if !bytes.Equal(rung, want) {
				t.Errorf("the rung through every step is not the key")
			}
			continue
		}
		key, id, err := l.DeriveFrom("AKIDEXAMPLE", rung, to, created, scope)
		if err != nil || !bytes.Equal(key, want) || id != wantID {
			t.Errorf("from %s: %x %s %v, want %x %s", to, key, id, err, want, wantID)
		}
		// And from that rung onwards.
		if to == "date" {
			later, err := l.Rung(rung, "date", "service", created, scope)
			k2, _, _ := l.DeriveFrom("AKIDEXAMPLE", later, "service", created, scope)
			if err != nil || !bytes.Equal(k2, want) {
				t.Errorf("date -> service: %v", err)
			}
		}
	}
	if _, err := l.Rung(secret, "service", "region", created, scope); err == nil || !strings.Contains(err.Error(), `step "region" does not come after "service"`) {
		t.Errorf("a rung before its start: %v", err)
	}
}
