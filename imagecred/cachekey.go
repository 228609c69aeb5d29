package imagecred

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
)

// globalCacheKey is the base key of cacheKeyType Global; the angle brackets keep it apart
// from any image or registry name (kubelet 1.34+; 1.33 used "global").
const globalCacheKey = "<global>"

// keyBuilder writes the kubelet's cache-key bytes: strings as a big-endian uint16 length and
// the bytes, annotation maps as a uint32 count and the sorted key/value pairs. A string
// longer than 65535 bytes cannot be encoded and fails the key, as it does in the kubelet.
type keyBuilder struct {
	b   []byte
	err error
}

func (k *keyBuilder) str(s string) *keyBuilder {
	if len(s) > math.MaxUint16 {
		if k.err == nil {
			k.err = fmt.Errorf("cache key component of %d bytes is longer than 65535", len(s))
		}
		return k
	}
	k.b = binary.BigEndian.AppendUint16(k.b, uint16(len(s))) //nolint:gosec // len(s) <= MaxUint16, checked above
	k.b = append(k.b, s...)
	return k
}

func (k *keyBuilder) annotations(m map[string]string) *keyBuilder {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	k.b = binary.BigEndian.AppendUint32(k.b, uint32(len(keys))) //nolint:gosec // a map of over 4G annotations cannot exist
	for _, key := range keys {
		k.str(key).str(m[key])
	}
	return k
}

func (k *keyBuilder) build() (string, error) { return string(k.b), k.err }

// serviceAccountKey identifies the service-account dimension of a cache entry: namespace,
// name, UID and the annotations passed to the plugin, and the token's hash for cacheType
// Token (the kubelet's bytes).
func serviceAccountKey(namespace, name, uid string, annotations map[string]string, tokenHash string) (string, error) {
	k := (&keyBuilder{}).str(namespace).str(name).str(uid).annotations(annotations)
	if tokenHash != "" {
		k.str("token").str(tokenHash)
	}
	return k.build()
}

func cacheKey(base, saKey string) (string, error) {
	return (&keyBuilder{}).str(base).str(saKey).build()
}

// scopeKey is the service-account dimension of a request's keys: the account, its
// annotations and the token's hash when the request carries a token; empty without an
// account.
func scopeKey(sa *ServiceAccountRequest) (string, error) {
	if sa == nil {
		return "", nil
	}
	return serviceAccountKey(sa.Namespace, sa.Name, string(sa.UID), sa.Annotations, hashToken(sa.Token))
}

func hashToken(token string) string {
	if token == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}
