#!/usr/bin/env bash
# Checks the subjects of the commits since hack/commitcheck.base (the commit where the rule
# began; older history is left as it landed): at most 72 characters, so that one-line logs,
# GitHub and git's own tools show them whole. Detail belongs in the body. A clone without
# that commit (shallow, or a source archive) has nothing to check.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$(tr -d '[:space:]' <hack/commitcheck.base)
if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
	echo "commitcheck: $base is not in this clone; nothing to check" >&2
	exit 0
fi
long=$(git log --format='%h %s' "$base..HEAD" | awk '{ s = substr($0, index($0, " ") + 1); if (length(s) > 72) print }')
if [[ -n "$long" ]]; then
	echo "commitcheck: commit subjects longer than 72 characters (say the rest in the body):"
	echo "$long" | sed 's/^/  /'
	exit 1
fi
