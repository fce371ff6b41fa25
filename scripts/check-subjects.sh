#!/usr/bin/env bash
# Refuses commit subjects longer than 72 characters, so that `git log --oneline` and
# `git blame` show a line per commit (issue 38). The history before SINCE keeps its long
# subjects: rewriting landed commits would break every clone.
set -euo pipefail
since=${SINCE:-c041000}
max=72
git rev-parse -q --verify "$since^{commit}" >/dev/null || { echo "check-subjects: $since is not in this clone's history: nothing to check"; exit 0; }
long=$(git log --format='%h %s' "$since"..HEAD | awk -v max="$max" '{ s = substr($0, index($0, " ") + 1); if (length(s) > max) printf "%s (%d characters)\n", $0, length(s) }')
if [ -n "$long" ]; then
  echo "commit subjects over $max characters (the why and the numbers go in the body):"
  echo "$long"
  exit 1
fi
echo "commit subjects: all at most $max characters since $since"
