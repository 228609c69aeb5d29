#!/usr/bin/env bash
# Prints kplug's version for the checkout it is run in, in the form the go command gives the
# same commit, so that `make build`, `make release` and `go install
# github.com/kplug/kplug/cmd/kplug@<commit>` report one version:
#   a tag on HEAD            v1.2.3
#   commits after tag v1.2.3 v1.2.4-0.20261124143236-0123456789ab  (Go's pseudo-version)
#   no tag yet               v0.0.0-20261124143236-0123456789ab
# with "+dirty" when the work tree has uncommitted changes, as Go 1.24+ stamps it.
# Without git (a source archive) it prints "devel".
set -euo pipefail
cd "$(dirname "$0")/.."
if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
	echo devel
	exit 0
fi
dirty=""
if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
	dirty="+dirty"
fi
if tag=$(git describe --tags --exact-match --match 'v[0-9]*' HEAD 2>/dev/null); then
	echo "$tag$dirty"
	exit 0
fi
when=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)
hash=$(git rev-parse --short=12 HEAD)
if base=$(git describe --tags --abbrev=0 --match 'v[0-9]*.[0-9]*.[0-9]*' HEAD 2>/dev/null) &&
	[[ $base =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
	echo "v${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.$((BASH_REMATCH[3] + 1))-0.$when-$hash$dirty"
else
	echo "v0.0.0-$when-$hash$dirty"
fi
