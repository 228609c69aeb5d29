#!/usr/bin/env bash
# Compares the public API of every public package with the last release tag (v*) and lists
# incompatible changes (apidiff). From v1.0.0 on an incompatible change fails the check;
# under v1 it is only reported, as semantic versioning allows. Without a tag there is
# nothing to compare with yet, and the check says so.
set -euo pipefail
cd "$(dirname "$0")/.."
apidiff=${APIDIFF:-_output/bin/apidiff}

base=$(git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null) || {
	echo "apicheck: no release tag yet, so no API to compare with" >&2
	exit 0
}
pkgs=$(go list ./... | grep -Ev '/(internal|test|hack|cmd)(/|$)')
old=$(mktemp -d)
trap 'git worktree remove --force "$old/src" >/dev/null 2>&1 || true; rm -rf "$old"' EXIT
git worktree add --detach -q "$old/src" "$base"

incompatible=0
for pkg in $pkgs; do
	name=${pkg//\//_}
	if ! (cd "$old/src" && "$OLDPWD/$apidiff" -w "$old/$name.old" "$pkg") 2>/dev/null; then
		continue # a package new since the tag
	fi
	"$apidiff" -w "$old/$name.new" "$pkg"
	out=$("$apidiff" -incompatible "$old/$name.old" "$old/$name.new")
	if [[ -n "$out" ]]; then
		echo "apicheck: $pkg: incompatible with $base:"
		echo "$out" | sed 's/^/  /'
		incompatible=1
	fi
done
if ((incompatible)); then
	case $base in
	v0.*) echo "apicheck: allowed before v1 ($base); say so in the release notes" >&2 ;;
	*) echo "apicheck: incompatible changes since $base need a new major version" >&2; exit 1 ;;
	esac
fi
