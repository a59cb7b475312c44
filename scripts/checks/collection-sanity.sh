#!/usr/bin/env bash
# ansible-test sanity on the collection specops.infra, from local virtual environments
# (no docker), as the lint phase of scripts/test.sh runs it:
#
#   scripts/checks/collection-sanity.sh [ANSIBLE-TEST SANITY ARGS...]   e.g. --test pylint
#
# Every test ansible-test has for a collection runs (import, ansible-doc,
# validate-modules, pylint, pep8, ...); tests/sanity/ignore-<ansible-core>.txt names
# what is left out, with the reason on each line. Each test's tools are installed from
# PyPI into ansible-test's own venvs (~/.ansible/test/venv) on the first run.
#
# ansible-test puts pip into each of those venvs with a script it downloads from
# ci-files.testing.ansible.com, which this machine does not reach (PyPI only). Where its
# cache has no such script, a stand-in goes there: pip from the interpreter's own
# ensurepip, then the pinned pip from PyPI.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${SPECOPS_VENV:-$ROOT/.venv}
export PATH=$VENV/bin:$PATH
unset PYTHONPATH

pip_version=$(python - <<'PY'
import re
from pathlib import Path

import ansible_test

src = (Path(ansible_test.__file__).parent / "_internal/python_requirements.py").read_text()
print(re.search(r"pip='([0-9.]+)'", src).group(1))
PY
)
cache=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [[ ! -s $cache ]]; then
  mkdir -p "$(dirname "$cache")"
  cat >"$cache" <<'PY'
"""Stand-in for ansible-test's get-pip bootstrap (scripts/checks/collection-sanity.sh): pip from
ensurepip, then the packages asked for from PyPI; get-pip's own options dropped."""

import ensurepip
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
ensurepip.bootstrap(upgrade=True)
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "--upgrade", *args]))
PY
fi

cd "$ROOT/collections/ansible_collections/specops/infra"
# --venv delegates into a venv under tests/output/.tmp: a whole site-packages inside the
# checkout, which the project's scanners (API calls, docs) must not read; removed after.
rc=0
ansible-test sanity --venv --requirements --python 3.11 --color no "$@" || rc=$?
rm -rf tests/output/.tmp
exit "$rc"
