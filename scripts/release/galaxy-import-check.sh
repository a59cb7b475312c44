#!/usr/bin/env bash
# Galaxy's own import check on the collection as scripts/release/build-collection.py builds it:
# galaxy-importer (from scripts/release/galaxy-tools.lock; installed on first use into the tool
# venv .cache/galaxy-tools, never into the project's venv) runs ansible-doc on every plugin,
# ansible-lint on the roles and playbooks (offline) and the changelog/metadata checks
# Galaxy runs at upload. ansible-test sanity is off here (its default; the lint phase
# runs it on the collection: scripts/checks/collection-sanity.sh), so no docker is needed.
#
#   scripts/release/galaxy-import-check.sh [TARBALL]     (default: build one into a temp dir)
#
# Fails when the importer fails or logs an ERROR; prints its WARNING lines and a count.
# ~1.5-3.5 min (ansible-lint of every role and playbook): not in CI; run it before a release.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS=${SPECOPS_GALAXY_TOOLS:-$ROOT/.cache/galaxy-tools}
VENV=${SPECOPS_VENV:-$ROOT/.venv}
unset PYTHONPATH ANSIBLE_CONFIG

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tarball=$(realpath "${1:-$("$VENV/bin/python" "$ROOT/scripts/release/build-collection.py" --output-path "$tmp/dist")}")

"$ROOT/scripts/release/galaxy-tools.sh" "$TOOLS"

# The dependencies galaxy.yml names, from the project venv's `ansible` bundle, linked into
# the tool venv's site-packages: the importer points ANSIBLE_COLLECTIONS_PATH at its own
# extracted copy only, so ansible-lint's syntax checks find them through Ansible's scan
# of sys.path (Galaxy is never contacted). Without them, the playbooks and the role that
# call community.proxmox.proxmox / ansible.utils.fact_diff give 4 "internal-error"
# warnings (unresolved module), not errors.
bundle=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ansible_collections
tools_site=$("$TOOLS/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ansible_collections
for dep in community/general community/proxmox ansible/utils; do
  mkdir -p "$tools_site/${dep%/*}"
  ln -sfn "$bundle/$dep" "$tools_site/$dep"
done
mkdir -p "$tmp/work" "$tmp/ansible-tmp"
export ANSIBLE_LOCAL_TEMP=$tmp/ansible-tmp
export GALAXY_IMPORTER_TMP_ROOT_DIR=$tmp/work GALAXY_IMPORTER_ANSIBLE_LOCAL_TMP=$tmp/ansible-tmp
export PATH=$TOOLS/bin:$PATH

rc=0
cd "$tmp" # the importer writes importer_result.json into its working directory
python -m galaxy_importer.main "$tarball" >"$tmp/import.log" 2>&1 || rc=$?
grep -E '^(WARNING|ERROR)' "$tmp/import.log" || true
warnings=$(grep -c '^WARNING' "$tmp/import.log" || true)
errors=$(grep -c '^ERROR' "$tmp/import.log" || true)
tail -n 1 "$tmp/import.log"
echo "galaxy-importer: exit $rc, $errors error(s), $warnings warning(s) on $(basename "$tarball")"
[[ $rc -eq 0 && $errors -eq 0 ]]
