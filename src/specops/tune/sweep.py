"""The sweep driver: the evaluator behind the search, the canary's final state.

``run_sweep`` walks the space (coordinate ascent, or the grid) on one canary through an
:class:`~specops.tune.apply.Applier`. For each candidate: the translator renders it
(the engine cannot take it: recorded invalid, no restart); the applier applies it and
restarts; :func:`~specops.tune.apply.prove_restart` shows a new process that generates;
the lossless-output gate (:class:`~specops.tune.output_gate.OutputCheck`, on unless
the config says ``output_gate: false``; a mapping sets threshold, max_tokens,
degeneration) rejects a candidate whose greedy output differs
from the canary's before the sweep, or loops, without benchmarking it;
``specops bench`` measures the plan (results saved under ``runs/``) and the objective
and verdict are read from those results. Every step goes into the ledger
(``sweep.jsonl``), which makes an interrupted sweep resumable. Progress (candidate k of
at most N, run r, elapsed, ETA) goes to the log and, numbered, to ``progress.log``,
which ``playbooks/sweep.yml`` follows while the sweep runs as an async job. The config
is :mod:`specops.tune.config`'s.

No speculation (method ``none``, :mod:`specops.tune.plain`) is measured first, beside
every search space, ``min_repeats`` runs on the canary; recorded plain results that
stand (the config's ``plain.results``) take its place and nothing restarts for it. The
pick must beat it beyond noise, else the pick is ``none`` with the measured reason
(:func:`~specops.tune.search.choose`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.bench.plan import Plan
from specops.bench.results import Results
from specops.bench.runner import run_plan
from specops.errors import ValidationError
from specops.tune.apply import Applier, ApplyError, generates, prove_restart
from specops.tune.config import SweepConfig
from specops.tune.ledger import Ledger
from specops.tune.objective import measurement_from_results
from specops.tune.output_gate import OutputCheck, api_key_of
from specops.tune.plain import PLAIN_KEY, standing_plain
from specops.tune.report import write_outputs
from specops.tune.search import (
    Measurement,
    Outcome,
    Standing,
    ascend,
    grid,
    measure_plain,
    modelled,
)
from specops.tune.space import Candidate

__all__ = ["SweepEvaluator", "SweepResult", "replay_sweep", "report_sweep", "run_sweep"]

BenchFn = Callable[[Plan], Results]


def _run_bench(plan: Plan) -> Results:
    return asyncio.run(run_plan(plan))


class SweepEvaluator:
    """Applies, proves the restart, benchmarks and records; replays recorded runs."""

    def __init__(
        self,
        cfg: SweepConfig,
        applier: Applier,
        ledger: Ledger,
        out: Path,
        *,
        bench: BenchFn = _run_bench,
        ready: Callable[[str, str], None] = generates,
        log: Callable[[str], None] = print,
        gate: OutputCheck | None = None,
    ) -> None:
        self.ready = ready
        self.gate = gate
        self._gate_ready = gate is None
        self._gate_rejected: dict[str, str] = {}  # candidate key -> why (one verdict per key)
        self.cfg = cfg
        self.applier = applier
        self.ledger = ledger
        self.out = out
        self.bench = bench
        self.log = log
        self.running: str | None = None  # unknown at start: the first apply decides
        self.restarts = 0
        self.roofline: dict[str, Any] | None = None  # the canary's, from its last apply
        self.began = time.monotonic()
        self.seen: list[str] = []  # candidates measured (or replayed), in order
        self.lines = 0
        self.progress_file = out / "progress.log"
        self.progress_file.parent.mkdir(parents=True, exist_ok=True)
        self.progress_file.write_text("", encoding="utf-8")
        # no speculation's recorded runs that stand (run r reads the r-th): no restart
        self.recorded_plain: list[tuple[Path, Results]] = []

    def progress(self, text: str, *, final: bool = False) -> None:
        """One numbered line in progress.log (the playbook waits for line n), and the log."""
        self.lines += 1
        line = f"{'done' if final else self.lines} {text}"
        with self.progress_file.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        self.log(f"sweep: {text}")

    def _where(self, candidate: Candidate, repeat: int) -> str:
        if candidate.plain:
            elapsed = time.monotonic() - self.began
            return (
                f"no speculation (none) run {repeat + 1} | restarts {self.restarts} |"
                f" elapsed {elapsed:.0f} s"
            )
        if candidate.key not in self.seen:
            self.seen.append(candidate.key)
        k = self.seen.index(candidate.key) + 1
        bound = max(self.cfg.candidates_bound(), k)
        elapsed = time.monotonic() - self.began
        eta = elapsed / len(self.seen) * max(bound - len(self.seen), 0) if self.seen else 0.0
        prefix = "" if self.cfg.mode == "grid" else "at most "
        return (
            f"candidate {k} of {prefix}{bound} ({candidate.key}) run {repeat + 1} |"
            f" restarts {self.restarts} | elapsed {elapsed:.0f} s | ETA ~{eta:.0f} s"
            " for the candidates left"
        )

    def invalid(self, candidate: Candidate) -> None:
        if candidate.key not in self.ledger.invalid:
            self.ledger.record(
                {"kind": "invalid", "key": candidate.key, "profile": candidate.profile,
                 "reason": candidate.invalid}
            )  # fmt: skip
            self.log(f"{candidate.key}: invalid for the engine, not started: {candidate.invalid}")

    def apply(self, profile: Mapping[str, Any], key: str) -> dict[str, Any]:
        outcome = self.applier.apply(profile)
        if outcome.restarted:
            self.restarts += 1
        if outcome.roofline is not None:
            self.roofline = outcome.roofline
        prove_restart(outcome, self.applier.base_url, self.applier.served_model_name, self.ready)
        self.running = key
        return outcome.to_dict()

    def measure(self, candidate: Candidate, repeat: int) -> Measurement:
        recorded = self.ledger.run(candidate.key, repeat)
        if recorded is not None:
            m = recorded.measurement
            self.progress(f"{self._where(candidate, repeat)} | {m.objective:.1f} tok/s (recorded)")
            return m
        m = self._measure(candidate, repeat)
        verdict = "" if m.ok else f" REJECTED: {m.reason}"
        self.progress(f"{self._where(candidate, repeat)} | {m.objective:.1f} tok/s{verdict}")
        return m

    def _recorded(self, candidate: Candidate, repeat: int) -> Measurement:
        path, results = self.recorded_plain[repeat]
        m = measurement_from_results(results, self.cfg.correctness, self.cfg.objective)
        self._record(candidate, repeat, m, str(path), None, recorded=True)
        self.log(f"none run {repeat}: {m.objective:.1f} tok/s, recorded in {path} (no restart)")
        return m

    def _measure(self, candidate: Candidate, repeat: int) -> Measurement:
        restart = None
        if candidate.plain and repeat < len(self.recorded_plain):
            return self._recorded(candidate, repeat)
        if candidate.key in self._gate_rejected:
            m = Measurement(0.0, 0.0, False, self._gate_rejected[candidate.key])
            self._record(candidate, repeat, m, None, None)
            return m
        if not self._gate_ready and self.gate is not None:
            self.log(self.gate.prepare(self.applier.base_url))
            self._gate_ready = True
        if self.running != candidate.key:
            try:
                restart = self.apply(candidate.profile, candidate.key)
            except ApplyError as exc:
                self.running = None
                self.restarts += 1
                m = Measurement(0.0, 0.0, False, f"start failed: {str(exc).splitlines()[0]}")
                self._record(candidate, repeat, m, None, {"restarted": True, "error": str(exc)})
                self.log(f"{candidate.key}: {m.reason}")
                return m
            self.log(
                f"{candidate.key}: applied ({'restarted' if restart['restarted'] else 'unchanged'},"
                f" {restart['seconds']:.1f} s)"
            )
            why = self.gate.reject(self.applier.base_url) if self.gate is not None else None
            if why:
                self._gate_rejected[candidate.key] = why
                m = Measurement(0.0, 0.0, False, why)
                self._record(candidate, repeat, m, None, restart)
                self.log(f"{candidate.key}: REJECTED: {why}")
                return m
        results = self.bench(self.cfg.bench_plan(self.applier.base_url, self.roofline))
        path = results.save(self.out / "runs" / candidate.key.replace(",", "_") / f"r{repeat}.json")
        m = measurement_from_results(results, self.cfg.correctness, self.cfg.objective)
        self._record(candidate, repeat, m, str(path.relative_to(self.out)), restart)
        self.log(
            f"{candidate.key} run {repeat}: {m.objective:.1f} tok/s"
            f" (single-stream {m.tiebreak:.1f}){'' if m.ok else ' REJECTED: ' + m.reason}"
        )
        return m

    def _record(
        self, c: Candidate, repeat: int, m: Measurement, results: str | None,
        restart: dict[str, Any] | None, *, recorded: bool = False,
    ) -> None:  # fmt: skip
        self.ledger.record(
            {
                "kind": "run", "key": c.key, "repeat": repeat, "profile": c.profile,
                "objective": m.objective, "tiebreak": m.tiebreak, "ok": m.ok, "reason": m.reason,
                **({"per_position": list(m.per_position)} if m.per_position else {}),
                "results": results, "restart": restart,
                **({"recorded": True} if recorded else {}),
            }
        )  # fmt: skip


@dataclass
class SweepResult:
    outcome: Outcome
    restarts: int  # restarts this invocation made
    restarts_total: int  # restarts recorded in the ledger (all invocations)
    left_on: dict[str, Any] | None
    files: dict[str, Path] = field(default_factory=dict)

    def _standing(self, st: Standing | None) -> dict[str, Any] | None:
        if st is None:
            return None
        low, high = self.outcome.interval(st) or (None, None)
        return {"candidate": st.candidate.key, "profile": st.candidate.profile,
                "median": st.median, "interval": [low, high], "runs": len(st.runs)}  # fmt: skip

    def summary(self) -> dict[str, Any]:
        """What ``sweep run --json`` prints."""
        return {
            "pick": self._standing(self.outcome.pick),
            "runner_up": self._standing(self.outcome.runner_up),
            "best": self._standing(self.outcome.best),
            "plain": self._standing(self.outcome.plain),
            "plain_verdict": self.outcome.plain_verdict,
            "spread": self.outcome.spread,
            "restarts": self.restarts_total,
            "left_on": self.left_on,
            "files": {k: str(v) for k, v in self.files.items()},
        }


def run_sweep(
    cfg: SweepConfig,
    applier: Applier,
    out: Path,
    *,
    bench: BenchFn = _run_bench,
    ready: Callable[[str, str], None] = generates,
    log: Callable[[str], None] = print,
) -> SweepResult:
    ledger = Ledger(out / "sweep.jsonl", cfg.fingerprint())
    if ledger.resumed:
        log(f"resuming {ledger.path}: {len(ledger.runs)} run(s) recorded")
    gate = (
        OutputCheck(out / "output-reference.json", cfg.output_gate, api_key=api_key_of(cfg.plan))
        if cfg.output_gate is not None
        else None
    )
    ev = SweepEvaluator(cfg, applier, ledger, out, bench=bench, ready=ready, log=log, gate=gate)
    stand, refused = (
        standing_plain(
            list(cfg.plain.results), cfg.bench_plan(),  # the canary where the config says
            max_age_days=cfg.plain.max_age_days, engine_version=cfg.space.engine.version,
        )
        if cfg.plain.results
        else ([], [])
    )  # fmt: skip
    for why in refused:
        log(f"plain.results: not used: {why}")
    ev.recorded_plain = stand
    plain = measure_plain(ev, len(stand) or cfg.scoring.min_repeats)
    if cfg.mode == "grid":
        outcome = grid(cfg.space, ev, cfg.scoring, plain)
    elif cfg.mode == "model":
        outcome = modelled(cfg.space, ev, cfg.scoring, plain, cfg.max_candidates)
    else:
        outcome = ascend(
            cfg.space, ev, cfg.scoring, cfg.max_rounds, cfg.max_candidates, plain=plain
        )
    left_on: dict[str, Any] | None = None
    target: Candidate | None = None
    if cfg.restore:
        target = cfg.space.candidate(cfg.space.start())
    elif outcome.pick is not None:
        target = outcome.pick.candidate
    if target is not None and not target.invalid:
        if ev.running != target.key:
            ev.apply(target.profile, target.key)
        left_on = target.profile
        ledger.record({"kind": "final", "left_on": left_on, "restore": cfg.restore,
                       "pick": outcome.pick.candidate.key if outcome.pick else None})  # fmt: skip
    result = SweepResult(outcome, ev.restarts, ledger.restarts + 0, left_on)
    result.restarts_total = sum(
        1 for e in ledger.events
        if e.get("kind") == "run" and (e.get("restart") or {}).get("restarted")
    )  # fmt: skip
    result.files = write_outputs(cfg, outcome, ledger, out)
    pick = outcome.pick
    ev.progress(
        f"pick {pick.candidate.key if pick else 'nothing usable'};"
        f" restarts {result.restarts_total}; leaderboard {result.files['leaderboard_md']}",
        final=True,
    )
    return result


class _Replay:
    """The evaluator of a recorded sweep: every run read from its ledger, none measured."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def measure(self, candidate: Candidate, repeat: int) -> Measurement:
        recorded = self.ledger.run(candidate.key, repeat)
        if recorded is None:
            raise ValidationError(
                "results",
                f"{self.ledger.path} has no run {repeat + 1} of {candidate.key}: the sweep did"
                " not finish; `specops sweep run` with the same config and --out measures"
                " what is missing",
            )
        return recorded.measurement

    def invalid(self, candidate: Candidate) -> None:
        """Recorded by the run that made the ledger (nothing to add)."""


def report_sweep(cfg: SweepConfig, out: Path) -> SweepResult:
    """The outputs of a sweep whose runs are all in ``out/sweep.jsonl`` (written again
    from the ledger, no server touched): for a sweep measured where the reports could
    not be written, or whose outputs were lost. The search walks the recorded runs as
    :func:`run_sweep` walked them, so the pick is the one the sweep made."""
    outcome, ledger = replay_sweep(cfg, out)
    final = [e for e in ledger.events if e.get("kind") == "final"]
    result = SweepResult(outcome, 0, ledger.restarts, final[-1].get("left_on") if final else None)
    result.files = write_outputs(cfg, outcome, ledger, out)
    return result


def replay_sweep(cfg: SweepConfig, out: Path) -> tuple[Outcome, Ledger]:
    """The outcome of a sweep whose runs are all in ``out/sweep.jsonl``, walked again
    from its ledger (nothing measured, nothing written)."""
    path = out / "sweep.jsonl"
    if not path.is_file():
        raise ValidationError("out", f"{path}: no sweep results file (run `specops sweep run`)")
    ledger = Ledger(path, cfg.fingerprint())
    replay = _Replay(ledger)
    runs = sum(1 for key, _ in ledger.runs if key == PLAIN_KEY)
    plain = measure_plain(replay, runs or cfg.scoring.min_repeats)
    if cfg.mode == "grid":
        outcome = grid(cfg.space, replay, cfg.scoring, plain)
    elif cfg.mode == "model":
        outcome = modelled(cfg.space, replay, cfg.scoring, plain, cfg.max_candidates)
    else:
        outcome = ascend(
            cfg.space, replay, cfg.scoring, cfg.max_rounds, cfg.max_candidates, plain=plain
        )
    return outcome, ledger
