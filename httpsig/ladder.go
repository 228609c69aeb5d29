package httpsig

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"strings"
	"time"
)

// LadderKind is the only key derivation kind KEP-6308 defines ("Client configuration").
const LadderKind = "hmac-ladder"

// Date formats a ladder's date step may name: a closed set, so that every implementation,
// in any language, renders the same bytes (KEP-6308 "Client configuration").
const (
	LadderDateCompact = "YYYYMMDD"
	LadderDateDashed  = "YYYY-MM-DD"
)

// Ladder is a KEP-6308 HMAC key derivation ladder: the signing key is HMAC folded over the
// steps' inputs, starting from SecretPrefix followed by the secret. A step's input is a
// literal, a value each party supplies for the deployment (a scope step), or the date of
// the signature's own created parameter in UTC, so that signer and verifier agree across
// a date boundary without consulting their clocks. With SecretPrefix "AWS4" and the steps
// date, region, service and the literal "aws4_request" it is AWS Signature Version 4's
// signing key derivation.
//
// A ladder is not a secret: every party that derives states the same one.
type Ladder struct {
	Kind         string       `json:"kind"`
	Hash         string       `json:"hash"`
	SecretPrefix string       `json:"secretPrefix,omitempty"`
	Steps        []LadderStep `json:"steps"`
}

// LadderStep is one rung: exactly one of Date, Scope and Literal says where its input
// comes from.
type LadderStep struct {
	Name    string `json:"name"`
	Date    string `json:"date,omitempty"`
	Scope   bool   `json:"scope,omitempty"`
	Literal string `json:"literal,omitempty"`
}

// maxLadderSteps bounds a ladder: each step is an HMAC per signed request.
const maxLadderSteps = 16

// Validate checks the ladder: its kind and hash, and that each step is named once and
// takes its input from exactly one source.
func (l *Ladder) Validate() error {
	switch {
	case l.Kind != LadderKind:
		return fmt.Errorf("keyDerivation.kind %q: want %q", l.Kind, LadderKind)
	case l.Hash != "sha-256" && l.Hash != "sha-512":
		return fmt.Errorf("keyDerivation.hash %q: want sha-256 or sha-512 (the hash of derivation; signatures are hmac-sha256 either way)", l.Hash)
	case len(l.Steps) == 0:
		return errors.New("keyDerivation.steps: a ladder needs at least one step")
	case len(l.Steps) > maxLadderSteps:
		return fmt.Errorf("keyDerivation.steps: %d steps, at most %d", len(l.Steps), maxLadderSteps)
	}
	// Every derivation validates its ladder (a verifier derives on every request), so the
	// path of a valid ladder allocates nothing: no map for at most maxLadderSteps names,
	// and the step's place is spelled only in an error.
	for i, s := range l.Steps {
		where := stepPlace(i)
		if s.Name == "" {
			return fmt.Errorf("%s: a step needs a name", where)
		}
		if l.Step(s.Name) < i {
			return fmt.Errorf("%s: step name %q used twice", where, s.Name)
		}
		sources := 0
		if s.Date != "" {
			sources++
			if s.Date != LadderDateCompact && s.Date != LadderDateDashed {
				return fmt.Errorf("%s (%s): date %q: want %s or %s", where, s.Name, s.Date, LadderDateCompact, LadderDateDashed)
			}
		}
		if s.Scope {
			sources++
		}
		if s.Literal != "" {
			sources++
		}
		if sources != 1 {
			return fmt.Errorf("%s (%s): give exactly one of date, scope and literal", where, s.Name)
		}
	}
	return nil
}

// stepPlace names the i-th step in an error.
type stepPlace int

func (i stepPlace) String() string { return fmt.Sprintf("keyDerivation.steps[%d]", int(i)) }

// Step returns the index of the step named name, or -1.
func (l *Ladder) Step(name string) int {
	for i, s := range l.Steps {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// Inputs are the steps' inputs for a signature created at created, with scope supplying
// the scope steps' values: the values the key ID carries after its name.
func (l *Ladder) Inputs(created time.Time, scope map[string]string) ([]string, error) {
	in := make([]string, len(l.Steps))
	for i, s := range l.Steps {
		switch {
		case s.Date == LadderDateCompact:
			in[i] = created.UTC().Format("20060102")
		case s.Date == LadderDateDashed:
			in[i] = created.UTC().Format("2006-01-02")
		case s.Scope:
			v, ok := scope[s.Name]
			if !ok || v == "" {
				return nil, fmt.Errorf("key derivation: no value for scope step %q", s.Name)
			}
			if strings.Contains(v, "/") {
				return nil, fmt.Errorf("key derivation: scope step %q: a value may not contain \"/\", which separates the key ID's parts", s.Name)
			}
			in[i] = v
		default:
			in[i] = s.Literal
		}
	}
	for name := range scope {
		if i := l.Step(name); i < 0 || !l.Steps[i].Scope {
			return nil, fmt.Errorf("key derivation: %q is not a scope step of the ladder", name)
		}
	}
	return in, nil
}

// Derive folds the whole ladder over a root secret (SecretPrefix is put before it; it
// never applies to a rung), for
// a signature created at created. It returns the signing key and the key ID: name
// followed by each step's input, "/"-separated.
func (l *Ladder) Derive(name string, secret []byte, created time.Time, scope map[string]string) (key []byte, keyID string, err error) {
	return l.fold(name, append([]byte(l.SecretPrefix), secret...), -1, created, scope)
}

// DeriveFrom folds the steps after the one named from over rung, the output of that step
// (an intermediate key a plugin or resolver returned in place of the root secret).
func (l *Ladder) DeriveFrom(name string, rung []byte, from string, created time.Time, scope map[string]string) (key []byte, keyID string, err error) {
	i := l.Step(from)
	if i < 0 {
		return nil, "", fmt.Errorf("key derivation: stage.from %q is not a step of the ladder", from)
	}
	return l.fold(name, rung, i, created, scope)
}

// Rung folds the steps after the one named from (empty: k is the root secret, with
// SecretPrefix put before it) through the one named to, for a signature created at
// created: the intermediate key a resolver or plugin hands out, staged at to, in place of
// what it holds. scope supplies the scope steps' values.
func (l *Ladder) Rung(k []byte, from, to string, created time.Time, scope map[string]string) ([]byte, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	after, upto := -1, l.Step(to)
	if from != "" {
		if after = l.Step(from); after < 0 {
			return nil, fmt.Errorf("key derivation: %q is not a step of the ladder", from)
		}
	} else {
		k = append([]byte(l.SecretPrefix), k...)
	}
	if upto <= after {
		return nil, fmt.Errorf("key derivation: step %q does not come after %q", to, from)
	}
	in, err := l.Inputs(created, scope)
	if err != nil {
		return nil, err
	}
	return l.hmacChain(k, in[after+1:upto+1]), nil
}

// hmacChain folds HMAC over inputs, starting from key k.
func (l *Ladder) hmacChain(k []byte, inputs []string) []byte {
	h := sha256.New
	if l.Hash == "sha-512" {
		h = sha512.New
	}
	key := append([]byte(nil), k...)
	for _, v := range inputs {
		m := hmac.New(h, key)
		m.Write([]byte(v))
		key = m.Sum(nil)
	}
	return key
}

func (l *Ladder) fold(name string, k []byte, after int, created time.Time, scope map[string]string) ([]byte, string, error) {
	if err := l.Validate(); err != nil {
		return nil, "", err
	}
	if name == "" || strings.Contains(name, "/") {
		return nil, "", fmt.Errorf("key derivation: key ID name %q: want a non-empty name without \"/\"", name)
	}
	in, err := l.Inputs(created, scope)
	if err != nil {
		return nil, "", err
	}
	return l.hmacChain(k, in[after+1:]), name + "/" + strings.Join(in, "/"), nil
}

// SigV4Ladder is AWS Signature Version 4's signing key derivation as a ladder: the
// secret access key after "AWS4", then the date, the region and the service (scope
// steps named region and service), then "aws4_request". A key derived through it, under
// the access key ID as name, has SigV4's credential scope as its key ID (KEP-6308 "A
// cloud provider example").
func SigV4Ladder() Ladder {
	return Ladder{Kind: LadderKind, Hash: "sha-256", SecretPrefix: "AWS4", Steps: []LadderStep{
		{Name: "date", Date: LadderDateCompact},
		{Name: "region", Scope: true},
		{Name: "service", Scope: true},
		{Name: "terminator", Literal: "aws4_request"},
	}}
}
