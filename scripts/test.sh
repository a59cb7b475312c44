#!/usr/bin/env bash
# Run every specops test on this machine, setting up what they need first.
#
#   scripts/test.sh                 set-up, lint, pytest, molecule (what CI runs)
#   scripts/test.sh lint            one phase: setup | lint | pytest | molecule
#   scripts/test.sh unit            the unit tests alone (no set-up; tests/plugins/kinds.py)
#   scripts/test.sh molecule NAME   one molecule scenario
#   PYTEST_ARGS="-k vfio" scripts/test.sh pytest
#
# Every lint step, every pytest test and every molecule scenario counts once in the
# closing line `N passed, N failed, N skipped`. Phase times are printed at the end.
# After the set-up, pytest runs beside a second lane (lint, then molecule, then the
# pytest shard PYTEST_SECOND_LANE names); SPECOPS_TEST_LANES=1 runs the phases one after
# the other.
#
# Under CI=true (what .ci/run sets) nothing may be left out: a skipped test or molecule
# scenario, a deselected test, or a scenario the time budget did not reach counts as
# failed unless .ci/skip-allowlist.yml names the hardware this machine lacks.
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
  # Every playbook against both inventories: the lab's and the production example's.
  local pb inv
  for inv in lab example; do
    for pb in deploy.yml playbooks/*.yml; do
      [[ -f $pb ]] || continue
      check "syntax-check $pb ($inv inventory)" \
        ansible-playbook --syntax-check -i "inventory/$inv" "$pb"
    done
  done
  check "inventory validation (example inventory)" \
    ansible-playbook -i inventory/example playbooks/preflight.yml
  check ruff ruff check .
  check ruff-format ruff format --check .
  check mypy mypy
  # The layers (pyproject.toml [tool.importlinter]): module_utils stdlib-only, the product
  # never imports the lab (specops_lab), no cycles in specops.tune.
  check import-contracts env PYTHONPATH="$ROOT/src:$ROOT/lab/src:$ROOT/collections" lint-imports --no-cache
  # The collection on its own: import, ansible-doc, validate-modules, pylint, pep8, ...
  # (~1.5 min with its tools' venvs in place; the first run makes them, ~3 min).
  check "collection sanity (ansible-test)" "$ROOT/scripts/checks/collection-sanity.sh"
  check argument-specs python3 scripts/checks/check-argument-specs.py
  # The collection's CHANGELOG.md is what antsibull-changelog generates from
  # changelogs/ (fragments and changelog.yaml linted; ~5 s, its tool venv made once).
  check "changelog current (antsibull-changelog)" "$ROOT/scripts/release/changelog.sh" check
  check "lab inventory = example + stand-in wiring" python3 scripts/checks/check-lab-inventory.py
  check "profile table (docs/speculative.md)" specops profile table --check docs/speculative.md
}

# The pytest shard that runs in the second lane, after molecule: every test that needs
# nothing the first lane's lab holds (no `specops lab up`, no lab node, no LXC container
# of the lab's bridge): the fleet tests (two docker vLLM nodes), the lab fleet's failure
# case (three nodes in a temp dir, no container, no network), the tests of the local CPU
# vLLM servers (one session-scoped pool, tests/plugins/vllm_server.py: its users move
# together, so each server starts once; the CI oracle's servers are in it), the EE's tests
# (this lane's ngram server; the EE's lab test stays with the lab) and the folders of
# unit, benchmark, serving, speculative and tune tests, none of which starts the lab. The
# first lane runs everything else (`--ignore` of exactly these paths), so every test runs
# once, in one lane or the other.
# Balance: the CI run of 5ff4569 took 4238 s in the first lane (the two lab deployments of
# tests/deploy 2563 s of it) against 149 + 1394 + 942 s in the second; the folders moved
# here took ~700 s of the first lane's time.
PYTEST_SECOND_LANE=(
  tests/tune
  tests/bench
  tests/serving
  tests/speculative
  tests/unit
  tests/lab/test_fleet_failures.py
  tests/lab/test_vllm_server.py
  tests/lab/test_oracle_serving.py
  tests/ee/test_ee.py
)

# run_pytest [NAME PATH...]: one pytest session over PATHs (default: all of tests/ but the
# second lane's shard, which `run_pytest second-lane` gets; `scripts/test.sh pytest`
# runs both, one after the other). Each session has its own report, temp dir and
# deselection list, so two may run at once.
run_pytest() {
  local name=${1:-}
  shift || true
  local paths=("$@") ignore=() p
  if [[ -z $name ]]; then
    run_pytest main
    run_pytest second-lane "${PYTEST_SECOND_LANE[@]}"
    return
  fi
  if ((${#paths[@]} == 0)); then
    paths=(tests)
    for p in "${PYTEST_SECOND_LANE[@]}"; do ignore+=("--ignore=$p"); done
  fi
  local out=$OUT/pytest-$name
  local xml=$out/pytest.xml
  rm -rf "$out"
  mkdir -p "$out"
  # SPECOPS_TEST_FLEET=0 leaves the three-node rollout/sweep tests (marker fleet) out of a
  # quick local run; they are then counted as deselected, and under CI=true a
  # deselected test fails the run (tests/plugins/strict.py).
  local select=()
  [[ ${SPECOPS_TEST_FLEET:-1} == 0 ]] && select=(-m "not fleet")
  # SPECOPS_TEST_KIND=unit|integration|e2e: that kind only (tests/plugins/kinds.py);
  # the other kinds' tests are left out on purpose, so they are not counted.
  local kind=${SPECOPS_TEST_KIND:-}
  [[ -n $kind ]] && select=(-m "$kind")
  # shellcheck disable=SC2086  # PYTEST_ARGS is a word list on purpose
  SPECOPS_TEST_OUT=$out python -m pytest -p no:cacheprovider --basetemp="$out/tmp" \
    --junitxml="$xml" --durations=40 --durations-min=15 "${select[@]}" ${PYTEST_ARGS:-} \
    "${ignore[@]}" "${paths[@]}"
  local rc=$?
  if [[ ! -f $xml ]]; then
    ko "pytest $name (no report, exit $rc)"
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
  local p f s d=0
  read -r p f s <<<"$counts"
  [[ -f $out/deselected.txt ]] && d=$(grep -c . "$out/deselected.txt")
  passed=$((passed + p))
  failed=$((failed + f))
  ((f > 0)) && failures+=("pytest $name: $f test(s)")
  # Under CI=true the strict plugin already turned every skip not in
  # .ci/skip-allowlist.yml into a failure: what is left here is allowlisted.
  skipped=$((skipped + s))
  ((s > 0)) && printf '  (%s pytest test(s) skipped, each allowlisted or outside CI)\n' "$s"
  if ((d > 0)) && [[ -n $kind ]]; then
    printf '  (%s test(s) of other kinds than %s not run)\n' "$d" "$kind"
    d=0
  elif ((d > 0)); then
    printf '  (%s pytest test(s) deselected: %s)\n' "$d" "$out/deselected.txt"
    if is_ci; then
      failed=$((failed + d))
      failures+=("pytest $name: $d test(s) deselected under CI")
    else
      skipped=$((skipped + d))
    fi
  fi
  if [[ -z $kind ]]; then
    if ((rc != 0 && f == 0 && d == 0)); then ko "pytest $name (exit $rc)"; fi
  elif ((rc > 1 && f == 0)); then
    # (exit 1 with no failure: CI=true's strict plugin on the other kinds' tests)
    ko "pytest $name (exit $rc)"
  fi
}

# Mission rows first (the serving path, then the host driver, card release and the
# container's userspace); container_base, which the inference scenario also converges,
# last: when time runs out, the one lost proves the least.
MOLECULE_ORDER=(inference nvidia_driver vfio_release nvidia_userspace container_base)
# CI stops a run at 90 minutes and then nothing lands: the whole run gets this many
# seconds; each scenario runs under a timeout equal to the time left, and a scenario
# not reached counts as failed under CI (skipped outside CI), never as passed.
BUDGET_S=${SPECOPS_TEST_BUDGET_S:-5100}
skipped=0

is_ci() { [[ ${CI:-} =~ ^(1|true|yes)$ ]]; }

# Molecule scenarios that may be left out under CI (hardware this machine lacks).
scenario_allowlisted() {
  python - "$1" <<'PY'
import sys
from pathlib import Path

import yaml

data = yaml.safe_load(Path(".ci/skip-allowlist.yml").read_text()) or {}
names = {e.get("scenario") for e in data.get("entries") or [] if e.get("hardware")}
sys.exit(0 if sys.argv[1] in names else 1)
PY
}

not_run() {
  local s=$1 why=$2
  if is_ci && ! scenario_allowlisted "$s"; then
    ko "molecule $s (not run: $why)"
  else
    skipped=$((skipped + 1))
    printf '  SKIP molecule %s (%s)\n' "$s" "$why"
  fi
}

run_molecule() {
  local scenarios=("$@") s left t0
  if ((${#scenarios[@]} == 0)); then
    for s in "${MOLECULE_ORDER[@]}"; do [[ -f molecule/$s/molecule.yml ]] && scenarios+=("$s"); done
    for s in molecule/*/molecule.yml; do
      s=$(basename "$(dirname "$s")")
      [[ " ${scenarios[*]} " == *" $s "* ]] || scenarios+=("$s")
    done
  fi
  for s in "${scenarios[@]}"; do
    left=$((BUDGET_S - SECONDS))
    if ((left < 60)); then
      not_run "$s" "run at ${SECONDS}s, ${left}s left of the ${BUDGET_S}s budget"
      continue
    fi
    t0=$SECONDS
    check "molecule $s" timeout --kill-after=30 "$left" molecule test -s "$s"
    printf '  (molecule %s: %ds)\n' "$s" $((SECONDS - t0))
  done
}

LANE_B=$OUT/lane-b

# Lint and molecule in a subshell; its counts, failures and times go to files that
# merge_lane_b adds to this shell's.
lane_b() {
  # a subshell: start its own counts (the parent's go on with pytest)
  passed=0 failed=0 skipped=0 failures=() timings=()
  phase lint run_lint
  phase molecule run_molecule
  phase pytest-2 run_pytest second-lane "${PYTEST_SECOND_LANE[@]}"
  {
    echo "$passed $failed $skipped"
  } >"$LANE_B.counts"
  printf '%s\n' "${failures[@]}" >"$LANE_B.failures"
  printf '%s\n' "${timings[@]}" >"$LANE_B.timings"
} >"$LANE_B.log" 2>&1

merge_lane_b() {
  printf '\n== lint and molecule (second lane)\n'
  cat "$LANE_B.log"
  if [[ ! -f $LANE_B.counts ]]; then
    ko "lint and molecule lane (ended without its counts)"
    return
  fi
  local p f s line
  read -r p f s <"$LANE_B.counts"
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  while IFS= read -r line; do [[ -n $line ]] && failures+=("$line"); done <"$LANE_B.failures"
  while IFS= read -r line; do [[ -n $line ]] && timings+=("$line (second lane)"); done <"$LANE_B.timings"
}

main() {
  local what=${1:-all}
  shift || true
  case $what in
    all)
      phase setup run_setup || true
      if [[ ${SPECOPS_TEST_LANES:-2} == 1 ]]; then
        phase lint run_lint
        phase pytest run_pytest
        phase molecule run_molecule
      else
        # Two lanes on two cores: lint, molecule (docker) and the fleet tests (docker
        # vLLM nodes) beside the rest of pytest (LXC, the lab, the vLLM servers). They
        # share no state: different containers, ports, directories. The second lane's output is shown when both are done.
        rm -f "$LANE_B".*
        lane_b &
        local lane_b_pid=$!
        phase pytest run_pytest main
        wait "$lane_b_pid"
        merge_lane_b
      fi
      ;;
    setup) phase setup run_setup ;;
    lint) phase lint run_lint ;;
    pytest) phase pytest run_pytest ;;
    molecule) phase molecule run_molecule "$@" ;;
    # The unit tests alone, for a contributor's quick run: no set-up (the venv must be
    # there: scripts/setup.sh venv), no process started (a unit test that starts one
    # fails: tests/plugins/kinds.py). Not a CI phase: CI runs every kind above.
    unit) SPECOPS_TEST_KIND=unit phase unit run_pytest unit tests ;;
    *) echo "test.sh: unknown phase '$what' (valid: all setup lint pytest molecule unit)" >&2; exit 2 ;;
  esac
  printf '\n== phase times\n'
  printf '  %s\n' "${timings[@]}"
  printf '  %-10s %5ds\n' total "$SECONDS"
  if ((${#failures[@]})); then
    printf '\n== failed\n'
    printf '  %s\n' "${failures[@]}"
  fi
  printf '\n%d passed, %d failed, %d skipped\n' "$passed" "$failed" "$skipped"
  ((failed == 0))
}

main "$@"
