// Package sigresolver is kplug's reference KEP-6308 key resolver (kplug
// signature-resolver): keys and identities from a file, reloaded when it changes, served
// over the resolver protocol (httpsig/resolverapi), with a nonce store.
package sigresolver

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/privdir"
)

// KeysKind is the kind of a key file.
const KeysKind = "SignatureResolverKeys"

// maxKeyFileBytes bounds a key file.
const maxKeyFileBytes = 4 << 20

// keyFile is the key file's shape.
type keyFile struct {
	Kind string `json:"kind"`
	// KeyDerivation is the ladder derived keys are on, stated to verifiers in Metadata.
	KeyDerivation *httpsig.Ladder `json:"keyDerivation,omitempty"`
	// CacheTTL is how long a verifier may keep an answer, unless a key says otherwise:
	// the revocation window. Default 1m.
	CacheTTL *metav1.Duration `json:"cacheTTL,omitempty"`
	Keys     []keySpec        `json:"keys"`
}

type keySpec struct {
	// KeyID is the key ID signatures carry; for a derived key, its name (the key ID's
	// part before the ladder's inputs).
	KeyID string `json:"keyID"`
	// Algorithm is the IANA name: ed25519, ecdsa-p256-sha256, ecdsa-p384-sha384,
	// rsa-pss-sha512 (with PublicKey) or hmac-sha256 (with a secret).
	Algorithm string `json:"algorithm"`
	// PublicKey is a PEM public key.
	PublicKey string `json:"publicKey,omitempty"`
	// SecretBase64 is a shared secret: used as it is, or, with Derived, as the ladder's
	// root (or the rung after Stage.From).
	SecretBase64 string `json:"secretBase64,omitempty"`
	Derived      bool   `json:"derived,omitempty"`
	Stage        *struct {
		From  string            `json:"from,omitempty"`
		Scope map[string]string `json:"scope,omitempty"`
	} `json:"stage,omitempty"`
	User     userSpec         `json:"user"`
	CacheTTL *metav1.Duration `json:"cacheTTL,omitempty"`
}

type userSpec struct {
	Username string              `json:"username"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

// key is one loaded key.
type key struct {
	keyID, algorithm string
	publicKeyDER     []byte
	secret           []byte
	derived          bool
	from             string
	scope            map[string]string
	user             userSpec
	cacheTTL         time.Duration
}

// keySet is a loaded key file.
type keySet struct {
	ladder *httpsig.Ladder
	byID   map[string]*key
}

var algorithms = map[string]bool{"ed25519": true, "ecdsa-p256-sha256": true, "ecdsa-p384-sha384": true, "rsa-pss-sha512": true, "hmac-sha256": true}

// loadKeys reads and checks a key file: a regular file (through links) of at most
// maxKeyFileBytes, that no one but its owner may write (issue 31 review, F6): whoever can
// write it names any user for any key. (Mode bits mean nothing on Windows.)
func loadKeys(path string) (*keySet, error) {
	if fi, err := os.Stat(path); err == nil && runtime.GOOS != "windows" && fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s is writable by group or others (mode %v): whoever can write it names any user for any key; chmod go-w it", path, fi.Mode().Perm())
	}
	b, err := privdir.ReadLinked(path, maxKeyFileBytes)
	if err != nil {
		return nil, err
	}
	return parseKeys(b)
}

func parseKeys(data []byte) (*keySet, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("not a YAML or JSON document: %w", err)
	}
	var kf keyFile
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kf); err != nil {
		return nil, err
	}
	if kf.Kind != KeysKind {
		return nil, fmt.Errorf("kind %q: want %s", kf.Kind, KeysKind)
	}
	if kf.KeyDerivation != nil {
		if err := kf.KeyDerivation.Validate(); err != nil {
			return nil, err
		}
	}
	ttl := time.Minute
	if kf.CacheTTL != nil {
		ttl = kf.CacheTTL.Duration
	}
	set := &keySet{ladder: kf.KeyDerivation, byID: map[string]*key{}}
	for i, s := range kf.Keys {
		k, err := s.load(kf.KeyDerivation, ttl)
		if err != nil {
			return nil, fmt.Errorf("keys[%d] (%s): %w", i, s.KeyID, err)
		}
		if set.byID[k.keyID] != nil {
			return nil, fmt.Errorf("keys[%d]: key ID %q is used twice", i, k.keyID)
		}
		set.byID[k.keyID] = k
	}
	return set, nil
}

func (s *keySpec) load(ladder *httpsig.Ladder, ttl time.Duration) (*key, error) {
	k := &key{keyID: s.KeyID, algorithm: s.Algorithm, user: s.User, cacheTTL: ttl, derived: s.Derived}
	if s.CacheTTL != nil {
		k.cacheTTL = s.CacheTTL.Duration
	}
	switch {
	case s.KeyID == "":
		return nil, errors.New("keyID: required")
	case !algorithms[s.Algorithm]:
		return nil, fmt.Errorf("algorithm %q: want ed25519, ecdsa-p256-sha256, ecdsa-p384-sha384, rsa-pss-sha512 or hmac-sha256", s.Algorithm)
	case s.User.Username == "":
		return nil, errors.New("user.username: required")
	case strings.HasPrefix(s.User.Username, "system:"):
		return nil, errors.New("user.username: the system: prefix is Kubernetes' own")
	case k.cacheTTL < 0:
		return nil, errors.New("cacheTTL: negative")
	}
	for _, g := range s.User.Groups {
		if strings.HasPrefix(g, "system:") {
			return nil, fmt.Errorf("user.groups: %q: the system: prefix is Kubernetes' own", g)
		}
	}
	if s.Algorithm == "hmac-sha256" {
		if s.PublicKey != "" || s.SecretBase64 == "" {
			return nil, errors.New("hmac-sha256 needs secretBase64 and no publicKey")
		}
		secret, err := base64.StdEncoding.DecodeString(s.SecretBase64)
		if err != nil || len(secret) == 0 {
			return nil, errors.New("secretBase64: not standard base64")
		}
		k.secret = secret
		if s.Derived {
			if ladder == nil {
				return nil, errors.New("derived: the file states no keyDerivation")
			}
			if strings.Contains(s.KeyID, "/") {
				return nil, errors.New("keyID: a derived key's name may not contain \"/\"")
			}
			if s.Stage != nil {
				k.from, k.scope = s.Stage.From, s.Stage.Scope
				if k.from != "" && ladder.Step(k.from) < 0 {
					return nil, fmt.Errorf("stage.from %q is not a step of the ladder", k.from)
				}
			}
		} else if s.Stage != nil {
			return nil, errors.New("stage: only a derived key has one")
		}
		return k, nil
	}
	if s.SecretBase64 != "" || s.Derived || s.Stage != nil {
		return nil, fmt.Errorf("%s is an asymmetric algorithm: give publicKey, and no secret, derived or stage", s.Algorithm)
	}
	block, _ := pem.Decode([]byte(s.PublicKey))
	if block == nil {
		return nil, errors.New("publicKey: no PEM block")
	}
	if _, err := x509.ParsePKIXPublicKey(block.Bytes); err != nil {
		return nil, fmt.Errorf("publicKey: %w", err)
	}
	k.publicKeyDER = block.Bytes
	return k, nil
}

// lookup finds the key for a key ID: the whole key ID, else (a derived key) the name
// before its first "/".
func (s *keySet) lookup(keyID string) *key {
	if k := s.byID[keyID]; k != nil && !k.derived {
		return k
	}
	name, _, ok := strings.Cut(keyID, "/")
	if k := s.byID[name]; ok && k != nil && k.derived {
		return k
	}
	return nil
}
