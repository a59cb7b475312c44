#!/usr/bin/env bash
# Run every specops test on this machine, setting up what they need first.
#
#   scripts/test.sh                 set-up, lint, pytest, molecule (what CI runs)
#   scripts/test.sh lint            one phase: setup | lint | pytest | molecule
#   scripts/test.sh molecule NAME   one molecule scenario
#   PYTEST_ARGS="-k vfio" scripts/test.sh pytest
#
# Every lint step, every pytest test and every molecule scenario counts once in the
# closing line `N passed, N failed`. Phase times are printed at the end.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${SPECOPS_VENV:-$ROOT/.venv}
OUT=$ROOT/.cache/test
mkdir -p "$OUT"
export PATH=$VENV/bin:$PATH
export ANSIBLE_CONFIG=$ROOT/ansible.cfg
export PY_COLORS=0 ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1 NO_COLOR=1

passed=0
failed=0
failures=()
timings=()

ok() { passed=$((passed + 1)); printf '  PASS %s\n' "$1"; }
ko() { failed=$((failed + 1)); failures+=("$1"); printf '  FAIL %s\n' "$1"; }

# check NAME CMD...: one counted check; its output goes to .cache/test/NAME.log and is
# shown when it fails.
check() {
  local name=$1 log
  shift
  log=$OUT/${name//[^A-Za-z0-9_.-]/_}.log
  if "$@" >"$log" 2>&1; then ok "$name"; else
    ko "$name"
    tail -n 60 "$log" | sed 's/^/    | /'
  fi
}

phase() {
  local name=$1 start=$SECONDS
  shift
  printf '\n== %s\n' "$name"
  "$@"
  timings+=("$(printf '%-10s %5ds' "$name" $((SECONDS - start)))")
}

run_setup() {
  if ! "$ROOT/scripts/setup.sh" packages docker image venv vllm; then
    ko "setup"
    return 1
  fi
  ok "setup"
}

run_lint() {
  check yamllint yamllint -s .
  check ansible-lint ansible-lint
  local pb
  for pb in deploy.yml playbooks/*.yml; do
    [[ -f $pb ]] || continue
    check "syntax-check $pb" ansible-playbook --syntax-check -i inventory/lab "$pb"
  done
  if [[ -d inventory/example ]]; then
    check "syntax-check deploy.yml (example inventory)" \
      ansible-playbook --syntax-check -i inventory/example deploy.yml
    check "inventory validation (example inventory)" \
      ansible-playbook -i inventory/example playbooks/preflight.yml
  fi
  check ruff ruff check .
  check ruff-format ruff format --check .
  check mypy mypy
  check argument-specs python3 scripts/check-argument-specs.py
  check "README profile table" specops profile table --check README.md
}

run_pytest() {
  local xml=$OUT/pytest.xml
  rm -f "$xml"
  # The three-node rollout/sweep runs (marker fleet, ~15 minutes here) are in the default
  # pass; SPECOPS_TEST_FLEET=0 leaves them out of a quick local run (see the README).
  local select=()
  [[ ${SPECOPS_TEST_FLEET:-1} == 0 ]] && select=(-m "not fleet")
  # shellcheck disable=SC2086  # PYTEST_ARGS is a word list on purpose
  python -m pytest -p no:cacheprovider --basetemp="$OUT/pytest-tmp" --junitxml="$xml" \
    "${select[@]}" ${PYTEST_ARGS:-} tests
  local rc=$?
  if [[ ! -f $xml ]]; then
    ko "pytest (no report, exit $rc)"
    return
  fi
  local counts
  counts=$(python - "$xml" <<'PY'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
t = sum(int(s.get("tests", 0)) for s in suites)
f = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
s = sum(int(s.get("skipped", 0)) for s in suites)
print(t - f - s, f, s)
PY
  )
  read -r p f s <<<"$counts"
  passed=$((passed + p))
  failed=$((failed + f))
  ((f > 0)) && failures+=("pytest: $f test(s)")
  skipped=$((skipped + s))
  ((s > 0)) && printf '  (%s pytest test(s) skipped)\n' "$s"
  if ((rc != 0 && f == 0)); then ko "pytest (exit $rc)"; fi
}

# Cheapest first; the real-vLLM scenario last.
MOLECULE_ORDER=(container_base nvidia_userspace vfio_release nvidia_driver inference)
# CI stops a run at 90 minutes and then nothing lands; no scenario starts after this
# many seconds of the run. A scenario not started is reported as skipped (never as
# passed) with the reason.
CUTOFF_S=${SPECOPS_TEST_CUTOFF_S:-4200}
skipped=0

run_molecule() {
  local scenarios=("$@") s
  if ((${#scenarios[@]} == 0)); then
    for s in "${MOLECULE_ORDER[@]}"; do [[ -f molecule/$s/molecule.yml ]] && scenarios+=("$s"); done
    for s in molecule/*/molecule.yml; do
      s=$(basename "$(dirname "$s")")
      [[ " ${scenarios[*]} " == *" $s "* ]] || scenarios+=("$s")
    done
  fi
  for s in "${scenarios[@]}"; do
    if ((SECONDS > CUTOFF_S)); then
      skipped=$((skipped + 1))
      printf '  SKIP molecule %s (run at %ds, past the %ds start cutoff)\n' "$s" "$SECONDS" "$CUTOFF_S"
      continue
    fi
    check "molecule $s" molecule test -s "$s"
  done
}

main() {
  local what=${1:-all}
  shift || true
  case $what in
    all)
      phase setup run_setup || true
      phase lint run_lint
      phase pytest run_pytest
      phase molecule run_molecule
      ;;
    setup) phase setup run_setup ;;
    lint) phase lint run_lint ;;
    pytest) phase pytest run_pytest ;;
    molecule) phase molecule run_molecule "$@" ;;
    *) echo "test.sh: unknown phase '$what' (valid: all setup lint pytest molecule)" >&2; exit 2 ;;
  esac
  printf '\n== phase times\n'
  printf '  %s\n' "${timings[@]}"
  printf '  %-10s %5ds\n' total "$SECONDS"
  if ((${#failures[@]})); then
    printf '\n== failed\n'
    printf '  %s\n' "${failures[@]}"
  fi
  if ((skipped)); then
    printf '\n%d passed, %d failed, %d skipped\n' "$passed" "$failed" "$skipped"
  else
    printf '\n%d passed, %d failed\n' "$passed" "$failed"
  fi
  ((failed == 0))
}

main "$@"
