# kplug: `make help` lists the targets.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
BIN := $(CURDIR)/_output/bin
# The version hack/version.sh gives the commit. Only `make VERSION=...` overrides it: a
# VERSION in the environment (CI systems set their own) would stamp another version into
# release binaries built from the same commit.
ifneq ($(origin VERSION),command line)
VERSION := $(shell hack/version.sh)
endif
LDFLAGS := -X github.com/kplug/kplug/internal/version.Version=$(VERSION)
# Unit tests are everything but the end-to-end suite.
UNIT_PKGS = $(shell $(GO) list ./... | grep -v '/test/e2e')
E2E_PKGS = ./test/e2e/...

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The tools of hack/tools/build.sh that each target starting a control plane runs, and no
# more: a cold make demo builds these three rather than all that make tools builds (the
# previous minor's kube-apiserver, the kubelet, containerd, golangci-lint, the real plugins:
# two thirds of the cold build's time). make test and make tools still build everything.
DEMO_TOOLS := etcd kube-apiserver kubectl
CLUSTER_TOOLS := $(DEMO_TOOLS) kube-controller-manager
NODE_TOOLS := $(DEMO_TOOLS) kubelet containerd containerd-shim-runc-v2 ctr crictl

.PHONY: tools
tools: ## Build the pinned etcd, kube-apiserver (1.36 and 1.35), kube-controller-manager, kubectl, kubelet, containerd, crictl, golangci-lint and the real exec plugins (aws-iam-authenticator, kubelogin) into _output/bin, and install the pinned npm RFC 9421 implementation for test/interop (skips what is current)
	hack/tools/build.sh

.PHONY: deps
deps: ## Install the Debian packages the tests need (SoftHSM2, swtpm, ...); not root: say what to run
	hack/deps.sh

.PHONY: build
build: ## Build kplug, kplug-exec-cache and kplug-proxy-plugin into _output/bin
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/kplug ./cmd/kplug
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/kplug-exec-cache ./cmd/kplug-exec-cache
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/kplug-proxy-plugin ./cmd/kplug-proxy-plugin

# Where make install puts kplug, kplug-exec-cache and kplug-proxy-plugin: $(PREFIX)/bin when PREFIX is given
# (make install PREFIX=/usr/local, which needs root), else where go install puts programs
# ($GOBIN, or the first GOPATH entry's bin, ~/go/bin by default): a directory of the user's.
INSTALL_DIR = $(if $(PREFIX),$(PREFIX)/bin,$(shell d=$$($(GO) env GOBIN); p=$$($(GO) env GOPATH); echo "$${d:-$${p%%:*}/bin}"))

.PHONY: install
install: build ## Put kplug, kplug-exec-cache and kplug-proxy-plugin on PATH: in $GOBIN or ~/go/bin, or with PREFIX=/usr/local in /usr/local/bin (says how to add the directory to PATH when it is not there)
	@hack/install.sh '$(INSTALL_DIR)' $(BIN)

.PHONY: test
test: deps tools test-unit test-e2e ## Unit tests with -race, then end-to-end tests (installs deps, builds tools first)

.PHONY: test-unit
test-unit: deps ## Unit tests with -race
	$(GO) test -race -count=1 $(UNIT_PKGS)
	cd test/bench && $(GO) test -race -count=1 ./...

.PHONY: test-e2e
test-e2e: deps ## End-to-end tests against a real etcd, kube-apiserver and kubectl, and the proxies' fault scenarios (test/load, short form)
	KPLUG_E2E_REQUIRED=1 $(GO) test -count=1 -timeout 30m $(E2E_PKGS)
	cd test/load && KPLUG_E2E_REQUIRED=1 $(GO) test -count=1 -timeout 20m ./...

.PHONY: load
load: deps tools ## Load, soak and faults, long form: each proxy 10 min beside the direct path, then faults; writes docs/reliability.md (about 30 min)
	cd test/load && KPLUG_E2E_REQUIRED=1 $(GO) test -count=1 -timeout 120m -v -run '^TestLoad$$' . -args -load

.PHONY: lint
lint: tools ## gofmt, go vet for linux, darwin and windows, golangci-lint, the public API against its record (api/kplug.txt), commit subjects
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [[ -n "$$unformatted" ]]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	for os in linux darwin windows; do echo "go vet ($$os)"; GOOS=$$os $(GO) vet ./...; done
	cd test/load && $(GO) vet ./...
	cd test/bench && $(GO) vet ./...
	$(BIN)/golangci-lint run --allow-parallel-runners ./...
	$(GO) run ./hack/apicheck
	hack/commitcheck.sh

.PHONY: api-record
api-record: ## Write the public API into api/kplug.txt, the record make lint holds the code to (an incompatible change after a release needs a CHANGELOG.md entry first)
	$(GO) run ./hack/apicheck -write

.PHONY: bench
bench: ## Benchmarks: kplug beside the upstream code it replaces (see docs/benchmarks.md)
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./...
	cd test/bench && $(GO) test -run '^$$' -bench . -benchmem -count 1 ./...

.PHONY: release
release: ## Archives of kplug for linux, darwin and windows (amd64, arm64), SBOMs, SHA256SUMS, the krew manifest and the OCI image, reproducibly, into _output/release
	hack/tools/build.sh syft
	$(GO) run ./hack/release --version $(VERSION) --syft $(BIN)/syft --out $(CURDIR)/_output/release

.PHONY: release-check
release-check: ## Build the release of HEAD twice (two clones, different paths) and check it: identical bytes, SHA256SUMS, SBOMs, image, krew, go install from its module proxy
	hack/tools/build.sh syft krew kubectl
	KPLUG_RELEASE_CHECK=1 $(GO) test -count=1 -timeout 20m -run '^TestGoInstallFromTheReleasesModuleProxy$$' -v ./hack/release/
	KPLUG_E2E_REQUIRED=1 KPLUG_RELEASE_CHECK=1 $(GO) test -count=1 -timeout 90m -run '^TestRelease$$' -v ./test/e2e/

.PHONY: image-push
image-push: ## Push the release's image and its SBOMs: make image-push IMAGE=registry.example/kplug:v1.2.3
	@[[ -n "$(IMAGE)" ]] || { echo "image-push: set IMAGE=registry/repository:tag" >&2; exit 2; }
	$(GO) run ./hack/release push --layout $(CURDIR)/_output/release/image $(IMAGE)

# demo, cluster and node build their programs with -trimpath, as make build builds kplug:
# compiler flags are part of the build cache's key, so with the same flags the hundreds of
# packages these programs share with kplug (client-go, apimachinery, the standard library)
# are compiled once on a cold cache, not twice.
.PHONY: demo
demo: demo-notice demo-tools build ## Start a control plane, show the four mechanisms against it, shut it down (the first run builds etcd, kube-apiserver and kubectl: about 9 minutes on 2 cores)
	$(GO) build -trimpath -o $(BIN)/kplug-demo-plugin ./test/e2e/testplugin
	$(GO) run -trimpath ./hack/demo --bin-dir $(BIN)

.PHONY: cluster
cluster: cluster-tools build ## Keep a control plane running for docs/getting-started until Ctrl-C (kube-controller-manager, kubeadm's files with the CA key, a node with a pod, a registry and its token endpoint; as root a second apiserver) and print the lines to paste into another terminal
	$(GO) run -trimpath ./hack/cluster --bin-dir $(BIN)

.PHONY: node
node: node-tools build ## As root: a kubelet (v1.36, containerd 2, runc) registers a Node and a pod pulls a private image with its service account's token through kplug's provider (make node ARGS=--wait keeps it running)
	$(GO) run -trimpath ./hack/node --bin-dir $(BIN) $(ARGS)

# Only the tools each of these targets runs (DEMO_TOOLS and friends, above).
.PHONY: demo-tools cluster-tools node-tools
demo-tools:
	hack/tools/build.sh $(DEMO_TOOLS)
cluster-tools:
	hack/tools/build.sh $(CLUSTER_TOOLS)
node-tools:
	hack/tools/build.sh $(NODE_TOOLS)

.PHONY: demo-notice
demo-notice:
	@echo "demo: the first run builds etcd, kube-apiserver and kubectl from their pinned sources (about 9 minutes on 2 quiet cores, longer on a busy machine), and keeps them in ~/.cache/kplug/tools: later runs, and fresh clones, start in seconds" >&2

.PHONY: clean
clean: ## Remove kplug build output (keeps the slow-to-build tools)
	rm -f $(BIN)/kplug $(BIN)/kplug-exec-cache $(BIN)/kplug-proxy-plugin
