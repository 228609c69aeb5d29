#!/usr/bin/env bash
# hack/install.sh DIR BUILD_DIR: what `make install` runs. Copies kplug, kplug-exec-cache
# and kplug-proxy-plugin from BUILD_DIR into DIR (created if missing), then checks that a shell
# finds them there: when DIR is not on PATH, or another kplug comes first, it prints the one
# line that fixes it. It never edits a shell profile: where PATH is set is the user's choice.
set -euo pipefail

dir=$1 build=$2
install -d "$dir"
# install(1) replaces each file (a new inode), so a kplug-exec-cache that kubectl is
# running keeps its old text: no "text file busy".
install -m 0755 "$build/kplug" "$build/kplug-exec-cache" "$build/kplug-proxy-plugin" "$dir/"
echo "installed kplug, kplug-exec-cache and kplug-proxy-plugin in $dir"

found=$(command -v kplug || true)
case ":$PATH:" in
*":$dir:"*)
	if [[ "$found" != "$dir/kplug" ]]; then
		echo "make install: $found comes first on your PATH: put $dir before it: export PATH=\"$dir:\$PATH\""
	fi
	;;
*)
	if [[ -n "$found" ]]; then
		echo "make install: $dir is not on your PATH, and $found is: put $dir before it: export PATH=\"$dir:\$PATH\""
	else
		echo "make install: $dir is not on your PATH; add it (in ~/.profile too, to keep it): export PATH=\"\$PATH:$dir\""
	fi
	;;
esac
