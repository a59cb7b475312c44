"""The sweep driver end to end against the synthetic SSE server (bench's test server).

The applier here starts a fresh synthetic server per profile so the driver's plumbing
is exercised for real over HTTP: apply, restart proof, specops bench, ledger, outputs,
resume, invalid candidates, failed starts. Which candidate wins depends on measured
speed, so these tests check that the pick agrees with what the ledger recorded, never
which setting a busy two-core machine happened to find fastest; the search's decisions
are tested on scripted objectives (test_search.py). The real vLLM runs are in
test_real_rollout.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from ansible_collections.specops.infra.plugins.module_utils.service_unit import Identity

from specops.bench.runner import run_plan
from specops.bench.synthetic import SyntheticConfig, SyntheticServer
from specops.errors import ValidationError
from specops.tune.apply import ApplyError, ApplyOutcome
from specops.tune.config import load_config
from specops.tune.ledger import Ledger
from specops.tune.sweep import report_sweep, run_sweep

from .conftest import NGRAM_BASE

_pids = itertools.count(1000)


class SyntheticApplier:
    """Restarts a synthetic server per profile; num_draft_tokens 9 'fails to start';
    no speculation (method none) streams one token per chunk."""

    served_model_name = "synthetic"

    def __init__(self) -> None:
        self.server: SyntheticServer | None = None
        self.identity: Identity | None = None
        self.profile: dict[str, Any] | None = None
        self.applies = 0
        self.restarts = 0  # server (re)starts, failed starts included

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"

    def apply(self, profile: Mapping[str, Any]) -> ApplyOutcome:
        self.applies += 1
        if dict(profile) == self.profile and self.identity is not None:
            return ApplyOutcome(False, self.identity, self.identity, 0.0)
        before = self.identity
        if self.server is not None:
            self.server.stop()
            self.server = None
        n = int(profile.get("num_draft_tokens", 1))
        self.restarts += 1
        if n == 9:
            self.identity = None
            raise ApplyError("engine exited during start (num_draft_tokens 9)")
        delay = 0.002 + 0.0015 * abs(n - 6)
        self.server = SyntheticServer(SyntheticConfig(tokens_per_chunk=n, chunk_delay_s=delay))
        self.server.start()
        pid = next(_pids)
        self.identity = Identity(
            load_state="loaded", active_state="active", unit_file_state="enabled",
            invocation_id=uuid.uuid4().hex, main_pid=pid, exec_main_start="",
            exec_main_start_monotonic=pid, active_enter_monotonic=pid + 1,
        )  # fmt: skip
        self.profile = dict(profile)
        return ApplyOutcome(True, before, self.identity, 0.01)

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


@pytest.fixture
def applier() -> Iterator[SyntheticApplier]:
    a = SyntheticApplier()
    yield a
    a.close()


def health_and_models(base_url: str, served: str) -> None:
    """The synthetic server always streams, so the readiness module's plain one-token
    completion does not apply to it: check /health and /v1/models here."""
    assert httpx.get(base_url + "/health", timeout=5).status_code == 200
    assert served in httpx.get(base_url + "/v1/models", timeout=5).text


def sweep(cfg, applier, out, log=lambda m: None):
    return run_sweep(cfg, applier, out, ready=health_and_models, log=log)


def config(**over: Any) -> dict[str, Any]:
    return {
        "canary": "lab-1",
        "base_url": "http://127.0.0.1:1",  # the applier's URL is what is measured
        "served_model_name": "synthetic",
        "base_profile": NGRAM_BASE,
        "space": {"num_draft_tokens": "2..9"},
        "plan": {"concurrency": [1, 4], "context_lengths": [64], "output_len": 48,
                 "requests_per_cell": 4, "waves_per_cell": 0, "warmup_per_cell": 1},
        "objective": {"min_repeats": 2, "max_repeats": 3, "min_gain": 0.05, "tolerance": 0.0},
        # The synthetic server only streams made-up text: the output gate (greedy
        # /v1/completions) is proven against the real vLLM in test_output_gate_vllm.py.
        "output_gate": False,
        **over,
    }  # fmt: skip


def test_sweep_runs_writes_outputs_and_leaves_the_winner(applier, tmp_path: Path) -> None:
    cfg = load_config(config())
    result = sweep(cfg, applier, tmp_path)
    pick = result.outcome.pick
    assert pick is not None
    # tolerance 0: the pick is the best median among the usable candidates
    usable = [st for st in result.outcome.standings.values() if st.usable]
    assert len(usable) >= 2
    assert pick.median == max(st.median or 0.0 for st in usable)
    assert applier.profile == pick.candidate.profile  # canary left on the winner
    assert result.restarts == applier.restarts  # every server start is counted
    assert result.restarts_total <= result.restarts  # the final apply is not a run
    md = (tmp_path / "leaderboard.md").read_text()
    assert "| rank |" in md
    assert pick.candidate.key in md
    assert (
        (tmp_path / "leaderboard.csv").read_text().startswith("rank,candidate,median,low,high,runs")
    )
    assert f"**Pick: {pick.candidate.key}**" in md
    assert "runner-up" in md
    # progress: numbered lines (the playbook waits for line n), candidate k of at most N
    progress = (tmp_path / "progress.log").read_text().splitlines()
    # no speculation first (min_repeats runs), then the walk from the base profile
    assert progress[0].startswith("1 no speculation (none) run 1 | restarts 1 |")
    assert progress[1].startswith("2 no speculation (none) run 2 | restarts 1 |")
    assert progress[2].startswith("3 candidate 1 of at most 8 (num_draft_tokens=4) run 1 |")
    assert [int(line.split()[0]) for line in progress[:-1]] == list(range(1, len(progress)))
    assert progress[-1].startswith(f"done pick {pick.candidate.key};")
    assert "ETA ~" in progress[3]
    assert "none" in result.outcome.standings
    assert result.outcome.plain_verdict is not None
    assert result.outcome.plain_verdict in md
    assert "| x plain |" in md
    assert (tmp_path / "objective.png").read_bytes()[:4] == b"\x89PNG"
    snippet = (tmp_path / "chosen-profile.yml").read_text()
    assert "inference_service_speculative:" in snippet
    assert f"num_draft_tokens: {dict(pick.candidate.assignment)['num_draft_tokens']}" in snippet
    # every measured run points at the bench results it was read from
    runs = [json.loads(x) for x in (tmp_path / "sweep.jsonl").read_text().splitlines()[1:]]
    for run in (r for r in runs if r["kind"] == "run"):
        assert (tmp_path / run["results"]).exists()
    # `sweep report`: the same outputs again from the ledger alone (raced repeats and
    # dropped candidates of the ascent replay too), nothing started or measured
    restarts = applier.restarts
    kept = {n: (tmp_path / n).read_text() for n in ("leaderboard.csv", "chosen-profile.yml")}
    for name in ("leaderboard.md", *kept, "objective.png"):
        (tmp_path / name).unlink()
    again = report_sweep(cfg, tmp_path)
    assert applier.restarts == restarts
    assert again.outcome.pick is not None
    assert again.outcome.pick.candidate.key == pick.candidate.key
    assert again.outcome.plain_verdict == result.outcome.plain_verdict
    assert again.left_on == result.left_on
    assert {n: (tmp_path / n).read_text() for n in kept} == kept
    assert f"**Pick: {pick.candidate.key}**" in (tmp_path / "leaderboard.md").read_text()


def test_grid_records_failed_starts_and_restore(applier, tmp_path: Path) -> None:
    cfg = load_config(config(mode="grid", restore=True))
    result = sweep(cfg, applier, tmp_path)
    st = result.outcome.standings["num_draft_tokens=9"]
    assert st.rejected is not None
    assert st.rejected.startswith("start failed")
    assert len(st.runs) == 1  # not benchmarked again after a failed start
    assert applier.profile is not None
    assert applier.profile["num_draft_tokens"] == 4
    assert result.restarts_total == 8 + 1  # no speculation is measured beside the grid
    # `sweep report` of a ledger cut before its last run names the run that is missing
    cut = tmp_path / "cut"
    cut.mkdir()
    lines = (tmp_path / "sweep.jsonl").read_text().splitlines()
    last_run = max(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "run")
    (cut / "sweep.jsonl").write_text("\n".join(lines[:last_run]) + "\n")
    with pytest.raises(ValidationError, match=r"sweep\.jsonl has no run \d+ of num_draft_"):
        report_sweep(cfg, cut)
    with pytest.raises(ValidationError, match="no sweep results file"):
        report_sweep(cfg, tmp_path / "elsewhere")


def test_interrupted_sweep_resumes_without_measuring_again(applier, tmp_path: Path) -> None:
    cfg = load_config(config(mode="grid"))

    class Interrupt(Exception):
        pass

    seen: list[str] = []

    def stop_after_five(msg: str) -> None:
        seen.append(msg)
        if sum(m.startswith("num_draft_tokens=") and " run " in m for m in seen) == 5:
            raise Interrupt

    with pytest.raises(Interrupt):
        sweep(cfg, applier, tmp_path, log=stop_after_five)
    lines_before = (tmp_path / "sweep.jsonl").read_text().splitlines()
    recorded = [json.loads(x) for x in lines_before[1:] if '"kind": "run"' in x]
    assert len(recorded) == 2 + 5  # no speculation's two runs, then five of the grid
    applies_before = applier.applies
    result = sweep(cfg, applier, tmp_path)
    # the 5 recorded runs are replayed: only the rest are measured
    new_runs = [
        json.loads(x)
        for x in (tmp_path / "sweep.jsonl").read_text().splitlines()[len(lines_before) :]
        if '"kind": "run"' in x
    ]
    assert {(r["key"], r["repeat"]) for r in new_runs}.isdisjoint(
        {(r["key"], r["repeat"]) for r in recorded}
    )
    # no speculation x 2 runs + 7 candidates x 2 runs + the failed start
    assert len(recorded) + len(new_runs) == 2 + 7 * 2 + 1
    assert applier.applies - applies_before <= 6 + 1  # remaining candidates (+ final apply)
    assert result.outcome.pick is not None


def test_a_changed_config_refuses_the_old_results_file(applier, tmp_path: Path) -> None:
    sweep(load_config(config(space={"num_draft_tokens": [4, 5]})), applier, tmp_path)
    with pytest.raises(ValidationError, match=r"results: .* belongs to a different sweep"):
        sweep(load_config(config(space={"num_draft_tokens": [4, 6]})), applier, tmp_path)


def test_the_results_file_of_a_gated_sweep_reopens(tmp_path: Path) -> None:
    """The output gate's settings (a tuple of prompts) read back from the header as
    JSON lists: the same config must still own its results file."""
    fingerprint = load_config(config(output_gate={"threshold": 0.9})).fingerprint()
    Ledger(tmp_path / "sweep.jsonl", fingerprint)
    Ledger(tmp_path / "sweep.jsonl", fingerprint)  # the resume: no "different sweep"


def test_bad_config_names_the_field() -> None:
    with pytest.raises(ValidationError, match=r"^canary: is required"):
        load_config({k: v for k, v in config().items() if k != "canary"})
    with pytest.raises(ValidationError, match=r"plan\.base_url"):
        load_config(config(plan={"base_url": "http://127.0.0.1:9"}))
    with pytest.raises(ValidationError, match=r"objective\.bogus: unknown key"):
        load_config(config(objective={"bogus": 1}))
    with pytest.raises(ValidationError, match=r"^mode: must be one of ascent, grid, model"):
        load_config(config(mode="random"))


def recorded_plain(tmp_path: Path, base_url: str, cfg_over: dict[str, Any]) -> Path:
    """A recorded plain run of the sweep's plan (measured on a synthetic server at the
    canary's URL), its throughput scaled x100: the deterministic case where no
    speculation wins by far, read from a results file as a sweep reads it."""
    cfg = load_config(config(base_url=base_url, **cfg_over))
    results = asyncio.run(run_plan(cfg.bench_plan()))
    for cell in results.cells:
        cell.stats = replace(cell.stats, output_tok_s=(cell.stats.output_tok_s or 0.0) * 100)
    # the synthetic server names itself synthetic-1; the canary's engine is the config's
    assert results.server.engine_version == "synthetic-1"
    results.server.engine_version = cfg.space.engine.version
    return results.save(tmp_path / "plain" / "results.json")


def test_recorded_plain_results_stand_for_no_speculation_without_a_restart(
    applier, tmp_path: Path
) -> None:
    over = {"space": {"num_draft_tokens": [4, 5]}, "mode": "grid",
            "objective": {"min_repeats": 1, "max_repeats": 1, "tolerance": 0.0}}  # fmt: skip
    plain_server = SyntheticServer(SyntheticConfig(tokens_per_chunk=1, chunk_delay_s=0.002))
    plain_server.start()
    try:
        url = f"http://127.0.0.1:{plain_server.port}"
        path = recorded_plain(tmp_path, url, over)
    finally:
        plain_server.stop()
    logs: list[str] = []
    cfg = load_config(config(base_url=url, plain={"results": [str(path)]}, **over))
    result = sweep(cfg, applier, tmp_path / "out", log=logs.append)
    assert not [m for m in logs if m.startswith("plain.results")], logs
    assert applier.restarts == 2 + 1  # the two candidates, then back to no speculation
    assert applier.profile == {"method": "none"}  # the canary is left on the pick
    plain = result.outcome.plain
    assert plain is not None
    assert len(plain.runs) == 1
    events = [json.loads(x) for x in (tmp_path / "out" / "sweep.jsonl").read_text().splitlines()]
    none_runs = [e for e in events if e.get("key") == "none"]
    assert [(e["recorded"], e["results"], e["restart"]) for e in none_runs] == [
        (True, str(path), None)
    ]
    assert result.outcome.pick is plain
    assert result.summary()["pick"]["candidate"] == "none"
    verdict = result.summary()["plain_verdict"]
    assert verdict.startswith("pick none: no speculation has the best median")
    assert f"**No speculation:** {verdict}." in (tmp_path / "out" / "leaderboard.md").read_text()
    snippet = (tmp_path / "out" / "chosen-profile.yml").read_text()
    assert "inference_service_speculative:\n  method: none" in snippet
    assert f"# Against no speculation: {verdict}." in snippet
    progress = (tmp_path / "out" / "progress.log").read_text().splitlines()
    assert progress[0].startswith("1 no speculation (none) run 1 | restarts 0 |")
    assert progress[-1].startswith("done pick none;")

    # too old for the sweep's max_age_days: not used (and said so), plain is measured
    logs.clear()
    applier.restarts = 0
    cfg = load_config(
        config(base_url=url, plain={"results": [str(path)], "max_age_days": 1e-9}, **over)
    )
    result = sweep(cfg, applier, tmp_path / "out2", log=logs.append)
    assert any(m.startswith(f"plain.results: not used: {path}: ") and "days old" in m for m in logs)
    assert result.outcome.plain is not None
    events = [json.loads(x) for x in (tmp_path / "out2" / "sweep.jsonl").read_text().splitlines()]
    assert [e.get("recorded") for e in events if e.get("key") == "none"] == [None]


def test_plain_config_names_the_field() -> None:
    with pytest.raises(ValidationError, match=r"^plain\.bogus: unknown key"):
        load_config(config(plain={"bogus": 1}))
    with pytest.raises(ValidationError, match=r"^plain\.results: must be a list"):
        load_config(config(plain={"results": [3]}))
    with pytest.raises(ValidationError, match=r"^plain\.max_age_days: must be days > 0"):
        load_config(config(plain={"max_age_days": 0}))
    cfg = load_config(config(plain={"results": "r.json"}))
    assert cfg.plain.results == ("r.json",)
    assert cfg.progress_bound() == 8 * 3 + 2 + 1  # 8 candidates x max_repeats, plain x 2
