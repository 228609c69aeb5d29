#!/usr/bin/env bash
# Builds the pinned development tools (hack/tools/go.mod) and the pinned releases of real
# credential plugins (build_release, below) into _output/bin. A tool is rebuilt only when its
# inputs change: the modules its package is built from (paths, versions, replacements), the
# Go version, its package and its flags; pinning another tool does not rebuild kube-apiserver.
# Built binaries are kept by that key in a cache outside the checkout
# (KPLUG_TOOLS_CACHE, default ~/.cache/kplug/tools), so a fresh clone on the same machine
# reuses them instead of spending twenty minutes rebuilding kube-apiserver.
#
# With tool names as arguments (hack/tools/build.sh syft), only those are built, and a name
# that is no tool fails before anything is built; the tools in on_demand (make release's)
# are built only when named. make demo, make cluster and make node name what they run.
set -euo pipefail
cd "$(dirname "$0")"
only=" $* "
out=$(cd ../.. && pwd)/_output/bin
cache=${KPLUG_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kplug/tools}

k8s=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)                         # e.g. v1.36.3
previous=$(cd previous && go list -m -f '{{.Version}}' k8s.io/kubernetes)     # e.g. v1.35.4
goversion=$(go version)

# on_demand tools are for make release and make release-check only, which name them: syft
# costs 11 minutes cold, which make test (and so CI) does not spend.
on_demand=" syft krew "

# wanted NAME: whether this run builds NAME (every tool but on_demand's, unless names were
# given). While listing, it only records NAME in names and builds nothing.
listing="" names=" "
wanted() {
	if [[ -n $listing ]]; then
		names+="$1 "
		return 1
	fi
	if [[ $only == "  " ]]; then
		[[ $on_demand != *" $1 "* ]]
	else
		[[ $only == *" $1 "* ]]
	fi
}

# place NAME KEY BUILDER ARGS...: put the binary kept under KEY into _output/bin, running
# `BUILDER ARGS... OUTPUT` to build it into the cache first when it is not there.
place() {
	local name=$1 key=$2
	shift 2
	if [[ -x "$out/$name" && "$(cat "$out/.$name.key" 2>/dev/null)" == "$key" ]]; then
		echo "tools: $name is up to date" >&2
		return
	fi
	local cached=$cache/$name-$key
	if [[ ! -x "$cached" ]]; then
		echo "tools: building $name from ${*: -1} (a cold build of the big ones takes minutes on 2 cores; it is cached in $cache)..." >&2
		local start=$SECONDS
		"$@" "$cached.tmp.$$"
		mv "$cached.tmp.$$" "$cached"
		echo "tools: built $name in $((SECONDS - start))s" >&2
	else
		echo "tools: $name from the cache ($cache)" >&2
	fi
	cp "$cached" "$out/$name.tmp"
	mv "$out/$name.tmp" "$out/$name"
	echo "$key" >"$out/.$name.key"
}

# build NAME PKG [LDFLAGS [MODDIR]]: a package of a module pinned in hack/tools/go.mod, or in
# the module at MODDIR (relative to hack/tools), such as previous/ for the previous minor.
build() {
	wanted "$1" || return 0
	local name=$1 pkg=$2 ldflags=${3:-} moddir=${4:-.}
	local key modules
	modules=$(cd "$moddir" && go list -deps -f '{{with .Module}}{{.Path}}@{{.Version}}{{with .Replace}}=>{{.Path}}@{{.Version}}{{end}}{{end}}' "$pkg" | sort -u)
	key=$(printf '%s\n%s\n%s\n%s\n' "$goversion" "$modules" "$pkg" "$ldflags" | sha256sum | cut -c1-32)
	place "$name" "$key" go_build "$moddir" "$ldflags" "$pkg"
}

go_build() { # MODDIR LDFLAGS PKG OUTPUT
	(cd "$1" && go build -trimpath -ldflags "$2" -o "$4" "$3")
}

# k8s_ldflags VERSION: stamp a Kubernetes release into its binaries, as the upstream release
# build does, so that /version and `kubectl version` report it rather than v0.0.0-master.
k8s_ldflags() {
	local version=$1 minor flags=""
	minor=$(echo "$version" | cut -d. -f2)
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	done
	echo "$flags"
}

# build_release NAME PKG VERSION [LDFLAGS]: a program as its authors released it, for tests
# that run real third-party plugins (LDFLAGS stamp what their release builds stamp).
# `go install PKG@VERSION` builds it from that version's own go.mod
# (no replacements, every module checked against the checksum database), so hack/tools/go.mod
# and its k8s.io replace block never touch its dependencies, nor it theirs. That graph is
# fixed by the version, so the Go version, package and version make the whole key (and
# CGO_ENABLED, when the caller sets it: `CGO_ENABLED=0 build_release ...`).
build_release() {
	wanted "$1" || return 0
	local name=$1 pkg=$2 version=$3 ldflags=${4:-}
	local key
	if [[ -z $ldflags && -z ${CGO_ENABLED:-} ]]; then
		key=$(printf '%s\n%s@%s\n' "$goversion" "$pkg" "$version" | sha256sum | cut -c1-32)
	else
		key=$(printf '%s\n%s@%s\n%s\n%s\n' "$goversion" "$pkg" "$version" "$ldflags" "${CGO_ENABLED:-}" | sha256sum | cut -c1-32)
	fi
	place "$name" "$key" go_install "$ldflags" "$pkg@$version"
}

go_install() { # LDFLAGS PKG@VERSION OUTPUT
	local bin
	bin=$(mktemp -d "$cache/.install.XXXXXX")
	GOBIN=$bin go install -trimpath -ldflags "$1" "$2"
	mv "$bin/$(basename "${2%@*}")" "$3"
	rmdir "$bin"
}

# npm_module NAME: the node packages pinned in test/interop/NAME/package-lock.json, for the
# interop tests, installed with `npm ci` (integrity-checked against the lock) into the cache
# under the lock's and node's hash, then copied to _output/node/NAME/node_modules.
npm_module() {
	wanted "$1" || return 0
	local name=$1 dir=../../test/interop/$1
	local dest=$out/../node/$name
	if ! command -v npm >/dev/null 2>&1; then
		echo "tools: npm is missing, so $name is not installed; make deps installs node and npm" >&2
		return
	fi
	local key
	key=$(cat "$dir/package-lock.json" <(node --version) | sha256sum | cut -c1-32)
	if [[ -d "$dest/node_modules" && "$(cat "$dest/.key" 2>/dev/null)" == "$key" ]]; then
		echo "tools: $name node modules are up to date" >&2
		return
	fi
	local cached=$cache/npm-$name-$key
	if [[ ! -d "$cached/node_modules" ]]; then
		echo "tools: npm ci for $name" >&2
		local tmp
		tmp=$(mktemp -d "$cache/.npm.XXXXXX")
		cp "$dir/package.json" "$dir/package-lock.json" "$tmp/"
		(cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
		rm -rf "$cached"
		mv "$tmp" "$cached"
	else
		echo "tools: $name node modules from the cache ($cache)" >&2
	fi
	rm -rf "$dest"
	mkdir -p "$dest"
	cp -R "$cached/node_modules" "$dest/node_modules"
	echo "$key" >"$dest/.key"
}

# all_tools: every tool, in the order they are built (each call builds only what wanted
# allows).
all_tools() {
	build etcd go.etcd.io/etcd/server/v3
	build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$(k8s_ldflags "$k8s")"
	build kubectl k8s.io/kubernetes/cmd/kubectl "$(k8s_ldflags "$k8s")"
	# The mixed version proxy's tests with real controllers and real version skew (issue 16):
	# kube-controller-manager of the same pin, and kube-apiserver of the previous minor, kept
	# under its version so that the two kube-apiservers never overwrite each other.
	build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$(k8s_ldflags "$k8s")"
	build "kube-apiserver-$previous" k8s.io/kubernetes/cmd/kube-apiserver "$(k8s_ldflags "$previous")" previous
	build golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	# A node for the image credential provider tests (issue 29, test/e2e/kubelet_test.go): the
	# kubelet of the same pin; containerd 2 with its runc shim and ctr (to import the pause
	# image), static so that no btrfs or other C headers are needed (the CRI plugin, the
	# overlayfs snapshotter and the runc shim are pure Go); crictl to inspect it. runc is
	# Debian's (make deps).
	build kubelet k8s.io/kubernetes/cmd/kubelet "$(k8s_ldflags "$k8s")"
	CGO_ENABLED=0 build_release containerd github.com/containerd/containerd/v2/cmd/containerd v2.4.2
	CGO_ENABLED=0 build_release containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 v2.4.2
	CGO_ENABLED=0 build_release ctr github.com/containerd/containerd/v2/cmd/ctr v2.4.2
	CGO_ENABLED=0 build_release crictl sigs.k8s.io/cri-tools/cmd/crictl v1.37.0
	# Real exec credential plugins that test/e2e runs through kplug (docs/exec-credentials.md,
	# "Tested with real plugins"). kubelogin v0.2.22 needs Go 1.26.10; v0.2.21 is the newest
	# that the Go here (go.mod: 1.26) builds.
	build_release aws-iam-authenticator sigs.k8s.io/aws-iam-authenticator/cmd/aws-iam-authenticator v0.6.13
	build_release kubelogin github.com/Azure/kubelogin v0.2.21
	# A real registry client for the docker credential helper's end-to-end tests
	# (test/e2e/imagecred_clients_test.go): go-containerregistry's CLI, at the version the
	# library's go.mod requires, so that the keychain and the CLI are the same code.
	build_release crane github.com/google/go-containerregistry/cmd/crane v0.22.1
	# The release's tools (docs/development.md, "Releases"), built on demand: syft makes the
	# SBOMs of make release; krew installs its krew manifest in make release-check.
	build_release syft github.com/anchore/syft/cmd/syft v1.57.0 "-X main.version=1.57.0"
	build_release krew sigs.k8s.io/krew/cmd/krew v0.4.4
	# An RFC 9421 implementation nobody here wrote, for test/interop (docs/development.md).
	npm_module rfc9421
}

# A name that is not a tool fails before anything is built: a misspelt name in a make
# target would otherwise build nothing and leave the target to fail later on a binary
# that is missing.
listing=1
all_tools
listing=""
for name in "$@"; do
	if [[ $names != *" $name "* ]]; then
		echo "tools: no tool is named \"$name\"; the tools are:${names% }" >&2
		exit 2
	fi
done
mkdir -p "$out"
mkdir -p -m 0700 "$cache"
all_tools
