#!/usr/bin/env bash
# The collection's release tools' venv (antsibull-changelog, galaxy-importer) from
# scripts/release/galaxy-tools.lock, hash-checked: made on first use and again when the lock
# changes (scripts/release/changelog.sh and scripts/release/galaxy-import-check.sh call this).
#
#   scripts/release/galaxy-tools.sh VENV
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS=${1:?usage: scripts/release/galaxy-tools.sh VENV}
LOCK=$ROOT/scripts/release/galaxy-tools.lock
python3 "$ROOT/scripts/release/lock.py" check galaxy-tools >/dev/null
want=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [[ -x $TOOLS/bin/python && $(cat "$TOOLS/.specops-lock" 2>/dev/null) == "$want" ]]; then
  exit 0
fi
python3 -m venv --clear "$TOOLS"
"$TOOLS/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps -r "$LOCK"
echo "$want" >"$TOOLS/.specops-lock"
