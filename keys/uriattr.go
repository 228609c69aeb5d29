package keys

import (
	"fmt"
	"net/url"
	"strings"
)

// uriAttrs calls set for each NAME=VALUE in part, a list separated by sep, with VALUE
// percent-decoded. pkcs11: and tpm: URIs share it, so that both refuse the same malformed
// input with the same words. seen carries the names across the path and the query: an
// attribute may appear once in the whole URI. scheme prefixes messages and shown is the URI
// as messages may quote it (without its query, where a secret may be).
func uriAttrs(scheme, shown, part, sep string, seen map[string]bool, set func(name, value string) error) error {
	if part == "" {
		return nil
	}
	for _, kv := range strings.Split(part, sep) {
		name, raw, ok := strings.Cut(kv, "=")
		if (!ok || name == "") && sep == "&" {
			// The query is where a secret may be (a mistyped pin-value): never quote it.
			return fmt.Errorf("%s: a query attribute without '=' in %q: want NAME=VALUE", scheme, shown)
		}
		if !ok || name == "" {
			return fmt.Errorf("%s: attribute %q in %q: want NAME=VALUE", scheme, kv, shown)
		}
		if seen[name] {
			return fmt.Errorf("%s: attribute %q appears twice", scheme, name)
		}
		seen[name] = true
		value, err := url.PathUnescape(raw)
		if err != nil {
			// Not err: its text quotes the bad escape, which may be part of a secret.
			return fmt.Errorf("%s: attribute %s: a malformed percent-escape in its value", scheme, name)
		}
		if err := set(name, value); err != nil {
			return err
		}
	}
	return nil
}
