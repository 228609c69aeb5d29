package execplugin

import (
	"fmt"
	"runtime"
	"strings"
)

// MergeEnv composes a plugin environment from layers of NAME=VALUE entries. A later entry
// replaces an earlier one with the same name, keeping the position where the name first
// appeared, so each name appears once. Names compare case-insensitively on Windows.
// An entry without '=' or with an empty name is an error.
func MergeEnv(layers ...[]string) ([]string, error) {
	var out []string
	index := map[string]int{}
	for _, layer := range layers {
		for _, kv := range layer {
			name, _, ok := strings.Cut(kv, "=")
			// Windows keeps per-drive working directories in variables such as "=C:".
			driveVar := runtime.GOOS == "windows" && strings.HasPrefix(kv, "=")
			if !ok || (name == "" && !driveVar) {
				return nil, fmt.Errorf("invalid environment entry %q: want NAME=VALUE", redactEntry(kv))
			}
			key := envKey(name)
			if i, seen := index[key]; seen {
				out[i] = kv
				continue
			}
			index[key] = len(out)
			out = append(out, kv)
		}
	}
	return out, nil
}

func envKey(name string) string {
	if runtime.GOOS == "windows" {
		return strings.ToUpper(name)
	}
	return name
}

// largestEntry returns the name and size of the biggest entry and the total size, counting
// each entry with its terminating NUL as the kernel does.
func largestEntry(env []string) (name string, size, total int) {
	for _, kv := range env {
		n := len(kv) + 1
		total += n
		if n > size {
			size = n
			name, _, _ = strings.Cut(kv, "=")
		}
	}
	return name, size, total
}

// redactEntry keeps an entry's name only: environment values often hold secrets.
func redactEntry(kv string) string {
	if name, _, ok := strings.Cut(kv, "="); ok {
		return name + "=<redacted>"
	}
	if len(kv) > 32 {
		return kv[:32] + "..."
	}
	return kv
}
