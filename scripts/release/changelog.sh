#!/usr/bin/env bash
# The collection's changelog, with antsibull-changelog (from scripts/release/galaxy-tools.lock;
# installed on first use into its own tool venv, .cache/galaxy-tools, never into the
# project's venv):
#
#   scripts/release/changelog.sh check      lint the fragments and changelogs/changelog.yaml, and
#                                   regenerate CHANGELOG.md in a temp copy: fails when the
#                                   committed one differs (the lint phase runs this, ~3 s)
#   scripts/release/changelog.sh release [--date YYYY-MM-DD]
#                                   release the version galaxy.yml holds: the fragments
#                                   move into changelogs/changelog.yaml, CHANGELOG.md is
#                                   regenerated (scripts/release/release.py release runs this
#                                   after its checks; then commit both)
#   scripts/release/changelog.sh ARGS...    antsibull-changelog ARGS in the collection's directory
#
# A change worth a line adds changelogs/fragments/<name>.yml (sections: see
# changelogs/config.yaml). CHANGELOG.md is generated: never edit it by hand.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
COLL=$ROOT/collections/ansible_collections/specops/infra
TOOLS=${SPECOPS_GALAXY_TOOLS:-$ROOT/.cache/galaxy-tools}
VENV=${SPECOPS_VENV:-$ROOT/.venv}
unset PYTHONPATH
# ansible-core of the project's venv (plugin descriptions at release time).
export PATH=$VENV/bin:$PATH

"$ROOT/scripts/release/galaxy-tools.sh" "$TOOLS"
changelog() { "$TOOLS/bin/antsibull-changelog" "$@"; }

case ${1:-check} in
check)
  cd "$COLL"
  changelog lint
  changelog lint-changelog-yaml changelogs/changelog.yaml
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cp -r galaxy.yml changelogs CHANGELOG.md "$tmp/"
  rm -f "$tmp/changelogs/.plugin-cache.yaml"
  (cd "$tmp" && changelog generate)
  if ! diff -u CHANGELOG.md "$tmp/CHANGELOG.md"; then
    echo "CHANGELOG.md is not what changelogs/changelog.yaml generates:" \
      "run scripts/release/changelog.sh generate and commit it" >&2
    exit 1
  fi
  echo "CHANGELOG.md is current"
  ;;
release)
  cd "$COLL"
  changelog release "${@:2}"
  rm -f changelogs/.plugin-cache.yaml
  ;;
*)
  cd "$COLL"
  changelog "$@"
  ;;
esac
