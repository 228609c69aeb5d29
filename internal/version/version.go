// Package version says which kplug this is and which Kubernetes release it is tested against.
package version

import (
	"runtime"
	"runtime/debug"
)

// Version is kplug's version, set at build time with
// -ldflags "-X github.com/kplug/kplug/internal/version.Version=v1.2.3". When unset it falls
// back to the module version recorded in the binary, or "devel".
var Version = ""

// Kubernetes is the Kubernetes release the end-to-end tests run against; hack/tools/go.mod
// pins the same k8s.io/kubernetes version (a unit test keeps the two in step).
const Kubernetes = "v1.36.3"

// KubernetesPrevious is the previous minor release, which the mixed version proxy's
// version-skew tests run beside Kubernetes; hack/tools/previous/go.mod pins it (a unit test
// keeps the two in step).
const KubernetesPrevious = "v1.35.4"

// Info is what `kplug version` reports.
type Info struct {
	Kplug      string `json:"kplug"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
	Kubernetes string `json:"kubernetes"`
}

// Get returns the version information of the running binary.
func Get() Info {
	return Info{Kplug: kplug(Version, debug.ReadBuildInfo), Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, Kubernetes: Kubernetes}
}

// kplug is the stamped version, else the main module's version that `go install
// module/cmd/kplug@v1.2.3` records in the binary, else "devel" (a build in a checkout
// records "(devel)").
func kplug(stamped string, readBuildInfo func() (*debug.BuildInfo, bool)) string {
	if stamped != "" {
		return stamped
	}
	if bi, ok := readBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
