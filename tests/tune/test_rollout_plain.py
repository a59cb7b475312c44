"""The rollout's gate against the node's plain baseline, on recorded results.

The recorded case is the H200 (vLLM 0.20.1, 1B model, 2026-12-02): ngram k=4 and a
draft model k=3 served 2.1-3.5x fewer tok/s than no speculation over the same cells.
A rollout of either onto such a node must be refused even when it is no slower than
the node's previous (speculative) profile.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from plugins.h200 import PLAN, measure, recorded

from specops.bench.plan import plan_from_mapping
from specops.bench.results import Results, load_results
from specops.cli import main
from specops.errors import ValidationError
from specops.tune.plain import why_not_plain
from specops.tune.rollout import (
    PlainBaseline,
    measure_baseline,
    plain_gate,
    plain_plan,
    plain_step,
    smoke_gate,
    smoke_step,
)


@pytest.fixture
def template(synthetic) -> Results:
    return measure(synthetic)


@pytest.mark.parametrize(("config", "ratio"), [("ngram", "x0.47"), ("draft_model", "x0.28")])
def test_the_h200_speculation_is_refused_against_plain(
    template: Results, config: str, ratio: str
) -> None:
    plain, spec = recorded(template, "none"), recorded(template, config)
    # against the previous profile (the same speculative config) the smoke gate passes ...
    assert smoke_gate(recorded(template, config), spec, throughput_drop=0.1).ok
    # ... against no speculation it does not
    verdict = plain_gate(plain, spec, throughput_drop=0.1)
    assert not verdict.ok
    assert verdict.gate == "plain"
    assert verdict.message.startswith("slower than no speculation beyond 10%: ")
    assert f"2580.3 tok/s without speculation ({ratio}; per cell" in verdict.message
    assert "c1-ctx512 x0." in verdict.message
    assert [f["note"] for f in verdict.findings] == ["slower than no speculation"] * 3
    # off: measured and reported, not gated
    off = plain_gate(plain, spec, throughput_drop=None)
    assert off.ok
    assert off.message.startswith("against no speculation (not gated): ")


def test_a_faster_profile_passes_and_one_within_the_band_too(template: Results) -> None:
    plain = recorded(template, "none")
    ngram = recorded(template, "ngram")
    loss = sum(c.stats.output_tok_s or 0 for c in ngram.cells) / sum(
        c.stats.output_tok_s or 0 for c in plain.cells
    )
    faster = plain_gate(plain, recorded(template, "ngram", scale=1.3 / loss), throughput_drop=0.1)
    assert faster.ok, faster.message
    assert "(x1.30;" in faster.message
    within = plain_gate(plain, recorded(template, "ngram", scale=0.95 / loss), throughput_drop=0.1)
    assert within.ok, within.message  # 5 % slower: within the gate's 10 % noise band
    beyond = plain_gate(plain, recorded(template, "ngram", scale=0.85 / loss), throughput_drop=0.1)
    assert not beyond.ok
    with pytest.raises(ValidationError, match="throughput_drop"):
        plain_gate(plain, ngram, throughput_drop=1.0)


def test_rollout_gate_cli_with_a_plain_baseline(template: Results, tmp_path: Path, capsys) -> None:
    spec = recorded(template, "ngram").save(tmp_path / "ngram.json")
    plain = recorded(template, "none").save(tmp_path / "plain.json")
    argv = ["rollout", "gate", "--baseline", str(spec), "--candidate", str(spec)]
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--plain-baseline", str(plain)]) == 1
    assert json.loads(capsys.readouterr().out)["gate"] == "plain"


def test_a_recorded_plain_baseline_stands_only_when_it_matches(template: Results) -> None:
    plain = recorded(template, "none")
    plan = plan_from_mapping(plain_plan(PLAN, plain.plan["base_url"]))
    assert why_not_plain(plain, plan) is None
    cases = {
        "measured another plan (changed: output_len)": plan_from_mapping(
            plain_plan({**PLAN, "output_len": 9}, plain.plan["base_url"])
        ),
    }
    for text, other in cases.items():
        assert text in (why_not_plain(plain, other) or "")
    assert "accepted drafted tokens in 3 cell(s)" in (
        why_not_plain(recorded(template, "ngram"), plan) or ""
    )
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=8)
    assert "days old (max_age_days 7)" in (why_not_plain(plain, plan, now=later) or "")
    assert why_not_plain(plain, plan, now=later, max_age_days=30) is None
    assert why_not_plain(plain, plan, engine_version="0.20.1") is not None  # synthetic-1
    plain.server.engine_version = "0.20.1+cu130"
    assert why_not_plain(plain, plan, engine_version="0.20.1") is None
    plain.interrupted = True
    assert "did not finish" in (why_not_plain(plain, plan) or "")


def test_plain_step_keeps_a_standing_baseline_and_measures_a_missing_one(
    synthetic, tmp_path: Path
) -> None:
    server = synthetic(chunk_delay_s=0.001, tokens_per_chunk=1)  # one token a step: no drafts
    plan = {**PLAN, "concurrency": [1], "humaneval": {"limit": 3}}
    path = tmp_path / "plain" / "node.json"
    check = plain_step(plan, server.url, tmp_path / "w", path, measure_missing=False)
    assert (check["stands"], check["measured"]) == (False, False)
    assert check["reason"] == f"{path} does not exist"
    first = plain_step(plan, server.url, tmp_path / "w", path)
    assert (first["stands"], first["measured"]) == (True, True)
    kept = json.loads(path.read_text())
    assert "humaneval" not in kept["plan"] or not kept["plan"]["humaneval"]["enabled"]
    again = plain_step(plan, server.url, tmp_path / "w", path)
    assert (again["stands"], again["measured"]) == (True, False)  # nothing re-measured
    # another plan: the recorded one no longer stands and is replaced
    other = plain_step({**plan, "output_len": 6}, server.url, tmp_path / "w", path)
    assert other["measured"]
    assert "changed: output_len" in other["replaced"]
    # a server that speculates is not a plain baseline
    spec = synthetic(chunk_delay_s=0.001, tokens_per_chunk=3)
    with pytest.raises(ValidationError, match=r"^plain: .* accepted drafted tokens"):
        plain_step(plan, spec.url, tmp_path / "w", tmp_path / "plain" / "spec.json")
    assert not (tmp_path / "plain" / "spec.json").exists()


def _scaled_copy(path: Path, factor: float, out: Path) -> Path:
    results = load_results(path)
    for cell in results.cells:
        cell.stats = replace(cell.stats, output_tok_s=(cell.stats.output_tok_s or 0.0) * factor)
    return results.save(out)


def test_smoke_step_gates_against_the_plain_baseline(synthetic, tmp_path: Path) -> None:
    """The controller's smoke step: the new profile passes its previous-profile gate
    (same server), then meets the node's plain baseline (recorded, scaled so that the
    verdict does not depend on this machine's speed)."""
    node = synthetic(chunk_delay_s=0.001)
    plain_server = synthetic(chunk_delay_s=0.001, tokens_per_chunk=1)
    plan = {**PLAN, "concurrency": [1, 4]}
    baseline = tmp_path / "baselines" / "n1.json"
    measure_baseline(plan, node.url, tmp_path / "w", baseline)
    measured = plain_step(plan, plain_server.url, tmp_path / "w", tmp_path / "p.json")["results"]
    fast_plain = _scaled_copy(Path(measured), 100.0, tmp_path / "plain-fast.json")
    slow_plain = _scaled_copy(Path(measured), 0.01, tmp_path / "plain-slow.json")
    common = {"throughput_drop": 0.9, "max_pass_drop": 0, "update_baseline": False}
    refused = smoke_step(plan, node.url, tmp_path / "w", baseline, plain=fast_plain, **common)
    assert (refused["ok"], refused["gate"]) == (False, "plain")
    assert refused["message"].startswith("slower than no speculation beyond 90%")
    assert refused["plain"]["gate"] == "plain"
    passed = smoke_step(plan, node.url, tmp_path / "w", baseline, plain=slow_plain, **common)
    assert passed["ok"], passed["message"]
    assert "against no speculation: " in passed["message"]
    alone = smoke_step(plan, node.url, tmp_path / "w", baseline, **common)
    assert alone["ok"]
    assert alone["plain"] is None


NGRAM = {"method": "ngram", "num_draft_tokens": 6}
SKIPPED = {"skipped": True, "changed": False}


def _said(**plain: object) -> dict[str, object]:
    """A registered controller step with its JSON answer on stdout."""
    return {"rc": 0, "stdout": json.dumps(plain)}


CASES = [
    # name, mode, new profile, running profile, the preflight's check, the baseline
    # step -> gate, auto (the baseline step keeps it), switch, --plain-running
    ("plain-new", "auto", {"method": "none"}, NGRAM, SKIPPED, SKIPPED,
     (False, False, False, False)),
    ("off", "off", NGRAM, NGRAM, SKIPPED, SKIPPED, (False, False, False, False)),
    ("stands", "auto", NGRAM, NGRAM, SKIPPED, _said(measured=False, plain={"stands": True}),
     (True, True, False, False)),
    ("missing-on-ngram", "auto", NGRAM, NGRAM, SKIPPED,
     _said(measured=True, plain={"stands": False}), (True, True, True, False)),
    ("kept-on-plain", "auto", NGRAM, {"method": "none"}, SKIPPED,
     _said(measured=True, plain={"stands": True, "measured": True}), (True, True, False, True)),
    ("older-unit", "auto", NGRAM, None, SKIPPED, _said(measured=False, plain={"stands": False}),
     (True, True, True, False)),
    ("recorded", "recorded", NGRAM, NGRAM, _said(stands=True), SKIPPED,
     (True, False, False, False)),
]  # fmt: skip


def test_the_roles_plain_baseline_decisions_under_ansible(tmp_path: Path) -> None:
    """roles/speculative_rollout/vars/main.yml as the role evaluates it: with auto the
    baseline step keeps the plain baseline (told when the node runs no speculation now);
    none that stands after it: the change block switches the node; 'recorded' reads the
    preflight's check; never for a plain profile or with 'off'."""
    repo = Path(__file__).resolve().parents[2]
    cases = [{"name": n, "mode": m, "new": new, "running": run, "check": check, "baseline": b}
             for n, m, new, run, check, b, _ in CASES]  # fmt: skip
    (tmp_path / "cases.json").write_text(json.dumps({"cases": cases}))
    out = tmp_path / "out.json"
    env = {**os.environ, "ANSIBLE_CONFIG": str(repo / "ansible.cfg")}
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c",
         "local", "-e", f"out={out}", "-e", f"@{tmp_path / 'cases.json'}",
         "-e", f"ansible_python_interpreter={sys.executable}",
         str(repo / "tests/fixtures/tune/rollout-plain-vars.yml")],
        cwd=repo, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    got = json.loads(out.read_text())
    for name, *_, want in CASES:
        d = got[name]
        running = "--plain-running" in d["baseline_args"]
        assert (d["gate"], d["auto"], d["switch"], running) == want, name
    assert got["stands"]["baseline_args"][:2] == got["stands"]["args"][-6:-4]  # the same file
    args = got["stands"]["args"]
    assert args[args.index("--plain-baseline") + 1].endswith(
        "/results/rollout/plain/localhost.json"
    )
    assert args[args.index("--max-age-days") + 1] == "7"
    assert json.loads(args[args.index("--plan-json") + 1])["concurrency"] == [1]


def test_the_baseline_step_keeps_the_plain_baseline_in_the_same_process(
    synthetic, tmp_path: Path
) -> None:
    plain_server = synthetic(chunk_delay_s=0.001, tokens_per_chunk=1)
    spec_server = synthetic(chunk_delay_s=0.001)
    plan = {**PLAN, "concurrency": [1], "humaneval": {"limit": 2}}
    # a node on no speculation without a baseline: the baseline just measured stands
    # for the plain one (the same plan, HumanEval aside): one benchmark, not two
    base, plain = tmp_path / "b" / "n1.json", tmp_path / "p" / "n1.json"
    out = measure_baseline(plan, plain_server.url, tmp_path / "w", base,
                           plain=PlainBaseline(plain, running_plain=True))  # fmt: skip
    assert out["measured"]
    assert (out["plain"]["stands"], out["plain"]["measured"]) == (True, True)
    assert out["plain"]["results"] == out["results"]
    assert plain.read_bytes() == base.read_bytes()
    # again: both recorded, nothing measured
    again = measure_baseline(plan, plain_server.url, tmp_path / "w", base,
                             plain=PlainBaseline(plain, running_plain=True))  # fmt: skip
    assert (again["measured"], again["plain"]["measured"], again["plain"]["stands"]) == (
        False, False, True,
    )  # fmt: skip
    # a node that speculates now, no plain baseline recorded: not measured here (the
    # role switches the node to no speculation for it)
    other = tmp_path / "p" / "n2.json"
    spec = measure_baseline(plan, spec_server.url, tmp_path / "w", tmp_path / "b" / "n2.json",
                            plain=PlainBaseline(other))  # fmt: skip
    assert spec["measured"]
    assert (spec["plain"]["stands"], spec["plain"]["measured"]) == (False, False)
    assert spec["plain"]["reason"] == f"{other} does not exist"
    assert not other.exists()
    # told it runs no speculation while it does: the baseline is not a plain one, and
    # the measurement made for it is refused
    wrong = PlainBaseline(tmp_path / "p" / "n3.json", running_plain=True)
    with pytest.raises(ValidationError, match="accepted drafted tokens"):
        measure_baseline(plan, spec_server.url, tmp_path / "w", tmp_path / "b" / "n3.json",
                         plain=wrong)  # fmt: skip
    assert not (tmp_path / "p" / "n3.json").exists()
