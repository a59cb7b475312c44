"""Rollout decisions: the smoke-benchmark gate and the rollout report.

The playbook (``playbooks/rollout.yml``, role ``speculative_rollout``) does the node
work; what is a decision lives here. :func:`smoke_gate` compares a node's smoke
benchmark with its stored baseline (both bench results documents, nothing
re-measured): any failed request, an output tok/s drop past ``throughput_drop`` in any
cell, a cell missing, or HumanEval passing fewer than the baseline by more than
``max_pass_drop`` fails it, naming the gate. :func:`load_records` / :func:`summary` read
the per-node records the role writes. :func:`measure_baseline` and :func:`smoke_step` are
the controller's two steps per node (``specops rollout baseline|smoke``), each one
process: measure, compare, keep the results. The baseline step also keeps the node's
greedy output on the lossless-output gate's prompts (``<node>.output-gate.json``); the
smoke step fails gate ``output`` when the new profile's output differs or loops
(:mod:`specops.tune.output_gate`).

No speculation is a baseline too (:mod:`specops.tune.plain`): :func:`plain_gate` compares
a new speculative profile's smoke benchmark with the node's *plain baseline* (the same
smoke plan on the node's server without speculation) on the sweep's objective (the
rollout's ``objective``: the one the profile was chosen for), by default the mean
output tok/s over the plan's cells: slower than plain beyond ``throughput_drop`` (the
gate's noise band) fails gate ``plain``, with the speed-up over plain per cell in the
message. :func:`plain_step` (``specops rollout plain``) keeps that baseline: a recorded
one that stands (same plan, model and engine, at most ``max_age_days`` old, no
speculation in it) is used as it is; else the node's server, which the role has put on
no speculation, is measured and kept.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specops.bench.compare import Thresholds, compare, speedup_rows
from specops.bench.plan import plan_from_mapping
from specops.bench.report import roofline_context
from specops.bench.results import Column, Results, load_results
from specops.bench.runner import run_plan
from specops.errors import ValidationError
from specops.templating import render
from specops.tune import output_gate
from specops.tune.objective import Objective
from specops.tune.plain import DEFAULT_MAX_AGE_DAYS, why_not_plain

__all__ = [
    "GateResult",
    "PlainBaseline",
    "load_records",
    "measure",
    "measure_baseline",
    "overhead",
    "overhead_table",
    "plain_gate",
    "plain_plan",
    "plain_step",
    "resolve_objective",
    "smoke_gate",
    "smoke_step",
    "summary",
    "summary_rows",
]


@dataclass(frozen=True)
class GateResult:
    ok: bool
    # "smoke-failures", "throughput", "correctness", "output" or "plain" when not ok
    gate: str | None
    message: str
    findings: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def smoke_gate(
    baseline: Results,
    candidate: Results,
    *,
    throughput_drop: float | None = 0.10,
    max_pass_drop: int = 0,
) -> GateResult:
    """Failures, then throughput (unless ``throughput_drop`` is None: measured, reported,
    not gated), then correctness."""
    if throughput_drop is not None and not 0 < throughput_drop < 1:
        raise ValidationError(
            "throughput_drop", f"must be in (0, 1), or None (off) (got {throughput_drop})"
        )
    failed = sum(c.stats.failed + c.warmup_failed for c in candidate.cells)
    if failed or not candidate.cells:
        return GateResult(
            False, "smoke-failures", f"{failed} failed request(s) in the smoke benchmark"
        )
    t = Thresholds(throughput_drop=throughput_drop, max_pass_drop=max_pass_drop)
    findings = compare(baseline, candidate, t)
    keep = [
        f for f in findings if f.metric in ("output_tok_s", "cell", "passed", "failed_requests")
    ]
    as_dicts = [asdict(f) for f in keep]
    bad_tp = [f for f in keep if f.regression and f.metric in ("output_tok_s", "cell")]
    if bad_tp:
        parts = [
            f"{f.where} {f.metric} {f.baseline:.1f} -> {f.candidate:.1f} ({f.change:+.0%})"
            if f.change is not None and f.baseline is not None and f.candidate is not None
            else f"{f.where} {f.note or f.metric}"
            for f in bad_tp
        ]
        return GateResult(
            False, "throughput",
            f"throughput regression past {throughput_drop or 0:.0%}: {'; '.join(parts)}",
            as_dicts,
        )  # fmt: skip
    bad_c = [f for f in keep if f.regression and f.metric in ("passed", "failed_requests")]
    if bad_c:
        return GateResult(
            False,
            "correctness",
            "; ".join(f"{f.where}: {f.note or f.metric}" for f in bad_c),
            as_dicts,
        )
    return GateResult(True, None, "smoke benchmark within thresholds", as_dicts)


def _objective(results: Results, keys: set[tuple[int, int]]) -> float | None:
    values = [
        c.stats.output_tok_s
        for c in results.cells
        if (c.concurrency, c.context_tokens) in keys and c.stats.output_tok_s is not None
    ]
    return sum(values) / len(values) if values else None


def plain_gate(
    plain: Results,
    candidate: Results,
    *,
    throughput_drop: float | None = 0.10,
    objective: Objective | None = None,
) -> GateResult:
    """The new profile's smoke benchmark against the node's plain baseline.

    On the operator's objective (``objective``, resolved against the smoke plan: the
    one the sweep chose the profile for, e.g. one request's decode speed at C=1), else
    the mean output tok/s over the cells both measured: below the plain baseline's by
    more than ``throughput_drop`` (the gate's noise band) fails gate ``plain``; None
    measures and reports it without gating. The findings are the speed-up rows per cell
    (:func:`~specops.bench.compare.speedup_rows`). A profile chosen for C=1 that loses at
    C=16 is what the sweep's leaderboard says it is: judged on the mean it would be
    refused for a load it was not chosen for (measured on the H100, SGLang 0.5.11).
    """
    if throughput_drop is not None and not 0 < throughput_drop < 1:
        raise ValidationError(
            "throughput_drop", f"must be in (0, 1), or None (off) (got {throughput_drop})"
        )
    rows = speedup_rows(plain, candidate)
    keys = {(r["concurrency"], r["context_tokens"]) for r in rows if r["speedup"] is not None}
    unit, on = "tok/s", ""
    if objective is None or objective.kind == "mean":
        ours, theirs = _objective(candidate, keys), _objective(plain, keys)
    else:
        ours, theirs = objective.value(candidate)[0], objective.value(plain)[0]
        unit, on = objective.unit, f" on the objective ({objective.label})"
    if ours is None or not theirs:
        return GateResult(
            False, "plain", f"no cell to compare with the plain baseline {plain.run_id}", rows
        )
    ratio = ours / theirs
    cells = ", ".join(
        f"c{r['concurrency']}-ctx{r['context_tokens']} x{r['speedup']:.2f}"
        for r in rows
        if r["speedup"] is not None
    )
    text = (
        f"{ours:.1f} vs {theirs:.1f} {unit} without speculation{on}"
        f" (x{ratio:.2f}; per cell {cells})"
    )
    if throughput_drop is None:
        return GateResult(True, None, f"against no speculation (not gated): {text}", rows)
    if ratio < 1 - throughput_drop:
        return GateResult(
            False, "plain",
            f"slower than no speculation beyond {throughput_drop:.0%}: {text}", rows,
        )  # fmt: skip
    return GateResult(True, None, f"against no speculation: {text}", rows)


def resolve_objective(
    plan: Mapping[str, Any], objective: Mapping[str, Any] | None
) -> Objective | None:
    """``objective`` (the sweep's, as a mapping) resolved against the smoke ``plan``:
    None when none is given; a ValidationError naming ``objective.<key>`` when it is
    not one, or names a cell the plan does not measure."""
    if not objective:
        return None
    if not isinstance(objective, Mapping):
        raise ValidationError("objective", f"must be a mapping (got {objective!r})")
    fields = {k: v for k, v in plan.items() if k != "base_url"}
    return Objective.from_mapping(objective).resolve(
        plan_from_mapping({**fields, "base_url": "http://127.0.0.1"})
    )


def plain_plan(plan: Mapping[str, Any], base_url: str) -> dict[str, Any]:
    """The plain baseline's plan: the smoke plan at the node, without HumanEval (the
    correctness gate compares with the previous profile, not with plain)."""
    return {**{k: v for k, v in plan.items() if k != "humaneval"}, "base_url": base_url}


def plain_step(
    plan: Mapping[str, Any],
    base_url: str,
    work: Path,
    plain: Path,
    *,
    max_age_days: float = DEFAULT_MAX_AGE_DAYS,
    engine_version: str | None = None,
    measure_missing: bool = True,
) -> dict[str, Any]:
    """Keep the node's plain baseline at ``plain`` (see the module docstring).

    ``{"stands": true, "measured": false}`` when the recorded one stands; with
    ``measure_missing`` false, ``{"stands": false, "reason": ...}`` when it does not;
    else the node's server is measured (it must not speculate) and kept.
    """
    fields = plain_plan(plan, base_url)
    bench_plan = plan_from_mapping(fields)
    reason = f"{plain} does not exist"
    if plain.exists():
        try:
            reason = (
                why_not_plain(
                    load_results(plain), bench_plan,
                    max_age_days=max_age_days, engine_version=engine_version,
                )
                or ""
            )  # fmt: skip
        except ValidationError as exc:
            reason = str(exc)
        if not reason:
            return {"stands": True, "measured": False, "plain": str(plain), "seconds": 0.0}
    if not measure_missing:
        return {"stands": False, "measured": False, "plain": str(plain), "reason": reason,
                "seconds": 0.0}  # fmt: skip
    began = time.monotonic()
    results = asyncio.run(run_plan(bench_plan, None, False))
    path = results.save(work / "plain" / results.run_id / "results.json")
    why = why_not_plain(
        results, bench_plan, max_age_days=max_age_days, engine_version=engine_version
    )
    if why:
        raise ValidationError("plain", f"the node's plain baseline does not stand: {why}")
    _keep(path, plain)
    return {"stands": True, "measured": True, "plain": str(plain), "results": str(path),
            "replaced": reason, "seconds": round(time.monotonic() - began, 2)}  # fmt: skip


def measure(plan: Mapping[str, Any], base_url: str, out: Path, humaneval_limit: int = 0) -> Path:
    """Run the smoke plan against ``base_url``; the results document's path under ``out``."""
    fields: dict[str, Any] = {**plan, "base_url": base_url}
    if humaneval_limit > 0:
        # the plan may tune the pass (max_tokens, timeout_s, ...); the limit is the gate's
        fields["humaneval"] = {**(plan.get("humaneval") or {}), "enabled": True,
                               "limit": humaneval_limit}  # fmt: skip
    results = asyncio.run(run_plan(plan_from_mapping(fields), None, False))
    return results.save(out / results.run_id / "results.json")


def _keep(results: Path, baseline: Path) -> None:
    baseline.parent.mkdir(parents=True, exist_ok=True)
    tmp = baseline.with_name(f".{baseline.name}.{os.getpid()}")
    shutil.copyfile(results, tmp)
    os.replace(tmp, baseline)


@dataclass(frozen=True)
class PlainBaseline:
    """The node's plain baseline as :func:`measure_baseline` keeps it beside the other."""

    path: Path
    max_age_days: float = DEFAULT_MAX_AGE_DAYS
    engine_version: str | None = None
    running_plain: bool = False  # the node's server runs no speculation now


def measure_baseline(
    plan: Mapping[str, Any], base_url: str, work: Path, baseline: Path, humaneval_limit: int = 0,
    *, gate: output_gate.GateConfig | None = None, plain: PlainBaseline | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Measure the node's current server into ``baseline`` unless it has one already.

    With ``gate`` (the output gate's settings; None: off), the node's current greedy
    output becomes its output-gate reference when it has none. With ``plain``, the
    node's plain baseline in the same process (``"plain"`` in the answer,
    :func:`plain_step`'s): a recorded one that stands is kept; else, when the server
    runs no speculation now, the baseline just measured stands for it (HumanEval
    aside, the same plan) or the server is measured for it; else it does not stand
    (the role switches the node to no speculation for it).
    """
    out = _measure_baseline(plan, base_url, work, baseline, humaneval_limit, gate=gate)
    if plain is not None:
        out["plain"] = _plain_beside(plan, base_url, work, out, plain)
    return out


def _plain_beside(
    plan: Mapping[str, Any], base_url: str, work: Path, baseline: Mapping[str, Any],
    plain: PlainBaseline,
) -> dict[str, Any]:  # fmt: skip
    kwargs: dict[str, Any] = {"max_age_days": plain.max_age_days,
                              "engine_version": plain.engine_version}  # fmt: skip
    check = plain_step(plan, base_url, work, plain.path, measure_missing=False, **kwargs)
    if check["stands"] or not plain.running_plain:
        return check
    if baseline.get("measured"):
        measured = Path(str(baseline["results"]))
        bench_plan = plan_from_mapping(plain_plan(plan, base_url))
        if why_not_plain(load_results(measured), bench_plan, **kwargs) is None:
            _keep(measured, plain.path)
            return {"stands": True, "measured": True, "plain": str(plain.path),
                    "results": str(measured), "replaced": check["reason"],
                    "seconds": 0.0}  # fmt: skip
    return plain_step(plan, base_url, work, plain.path, **kwargs)


def _measure_baseline(
    plan: Mapping[str, Any], base_url: str, work: Path, baseline: Path, humaneval_limit: int,
    *, gate: output_gate.GateConfig | None,
) -> dict[str, Any]:  # fmt: skip
    reference = output_gate.reference_beside(baseline)
    if gate is not None and not reference.exists():
        output_gate.record(
            base_url, reference, gate, "the node before the rollout",
            api_key=output_gate.api_key_of(plan),
        )  # fmt: skip
    if baseline.exists():
        return {"measured": False, "baseline": str(baseline), "seconds": 0.0}
    began = time.monotonic()
    results = measure(plan, base_url, work / "baseline", humaneval_limit)
    _keep(results, baseline)
    return {"measured": True, "baseline": str(baseline), "results": str(results),
            "seconds": round(time.monotonic() - began, 2)}  # fmt: skip


def smoke_step(
    plan: Mapping[str, Any],
    base_url: str,
    work: Path,
    baseline: Path,
    *,
    throughput_drop: float | None,
    max_pass_drop: int,
    humaneval_limit: int = 0,
    update_baseline: bool = True,
    gate: output_gate.GateConfig | None = None,
    plain: Path | None = None,
    objective: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Smoke benchmark, gate against the baseline, and (when it passed) the new baseline.

    With ``gate``, the new profile's greedy output is also judged against the node's
    reference (gate ``output``); with ``plain`` (the node's plain baseline), its
    speed against no speculation on ``objective`` (the sweep's objective as a mapping;
    none or empty: the mean output tok/s; :func:`plain_gate`, gate ``plain``). An
    objective naming a cell the smoke plan lacks is refused before anything is measured.
    """
    if not baseline.exists():
        raise ValidationError("baseline", f"{baseline} does not exist (measure it first)")
    judged = resolve_objective(plan, objective)
    began = time.monotonic()
    results = measure(plan, base_url, work / "smoke", humaneval_limit)
    result = smoke_gate(
        load_results(baseline), load_results(results),
        throughput_drop=throughput_drop, max_pass_drop=max_pass_drop,
    )  # fmt: skip
    if result.ok and gate is not None:
        out = output_gate.verdict(
            base_url, output_gate.reference_beside(baseline), gate,
            api_key=output_gate.api_key_of(plan),
        )  # fmt: skip
        if not out.ok:
            result = GateResult(False, "output", f"{out.check}: {out.message}", result.findings)
    against_plain = None
    if result.ok and plain is not None:
        verdict = plain_gate(
            load_results(plain), load_results(results), throughput_drop=throughput_drop,
            objective=judged,
        )  # fmt: skip
        against_plain = verdict.to_dict()
        if not verdict.ok:
            result = GateResult(False, "plain", verdict.message, result.findings)
        else:
            result = GateResult(True, None, f"{result.message}; {verdict.message}", result.findings)
    if result.ok and update_baseline:
        _keep(results, baseline)
    return {**result.to_dict(), "results": str(results), "plain": against_plain,
            "seconds": round(time.monotonic() - began, 2)}  # fmt: skip


def load_records(report_dir: Path) -> list[dict[str, Any]]:
    """The per-node records (``<node>.json``) a rollout wrote, in rollout order."""
    records = []
    for path in sorted(report_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValidationError("report_dir", f"{path}: {exc}") from None
        if isinstance(data, dict) and "node" in data:
            records.append(data)
    records.sort(key=lambda r: str(r.get("started_at", "")))
    return records


OVERHEAD_COLUMNS = (
    "rollout", "start>health", "overhead", "stop", "1st gen", "output gate", "baseline",
    "plain", "smoke", "orchestration",
)  # fmt: skip


def overhead(record: Mapping[str, Any]) -> dict[str, float] | None:
    """P4 for one changed node, in seconds (see ``scripts/experiments/bench-rollout-overhead.py``).

    ``overhead`` is the rollout minus the engine's start-to-healthy (systemd's
    ExecMainStart -> ActiveEnter); ``orchestration`` also leaves out what the engine
    and the measurements spend: the old server's stop, the first generation after
    /health, the output gate's greedy decoding, the baseline, the plain baseline (when
    measured in the rollout: its restart onto no speculation and its benchmark) and the
    smoke benchmark. (Records without ``output_gate_s`` or ``plain_s`` count them as 0.)
    None for a node this rollout did not restart (one a stopped rollout had already
    restarted, gated by the re-run): it has no engine start to take out.
    """
    engine = record.get("engine_start_to_healthy_s")
    if engine is None:
        return None
    total = float(record["rollout_s"])
    parts = [
        float(record.get(k) or 0)
        for k in ("engine_stop_s", "ready_s", "output_gate_s", "baseline_s", "plain_s", "smoke_s")
    ]
    over = total - float(engine)
    return dict(
        zip(OVERHEAD_COLUMNS, (total, float(engine), over, *parts, over - sum(parts)), strict=True)
    )


def overhead_table(records: list[dict[str, Any]]) -> list[str]:
    """P4 per changed node as a text table, and the worst overhead and orchestration
    (of the nodes this rollout restarted; the others are named below the table)."""
    lines = [f"{'node (seconds)':<22}" + "".join(f"{c:>14}" for c in OVERHEAD_COLUMNS)]
    rows, unrestarted = [], []
    for r in records:
        row = overhead(r)
        if row is None:
            unrestarted.append(str(r["node"]))
            continue
        rows.append(row)
        lines.append(f"{r['node']!s:<22}" + "".join(f"{v:14.1f}" for v in row.values()))
    if unrestarted:
        lines.append(
            f"not restarted by this rollout (gated on the server an earlier, stopped run"
            f" started): {', '.join(unrestarted)}"
        )
    if rows:
        lines.append(
            f"worst overhead {max(r['overhead'] for r in rows):.1f} s"
            " (rollout - start>health, incl. measurements)"
        )
        lines.append(
            f"worst orchestration {max(r['orchestration'] for r in rows):.1f} s (target <= 5 s)"
        )
    return lines


SUMMARY_COLUMNS: tuple[Column, ...] = (
    Column("node", "node"),
    Column("outcome", "outcome"),
    Column("failed_gate", "gate"),
    Column("rollout_s", "rollout s", 1),
    Column("engine_start_to_healthy_s", "engine start->healthy s", 1),
    Column("overhead_s", "overhead s", 1, "rollout - engine start->healthy"),
    Column("message", "note"),
)


def summary_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One keyed row per node (:data:`SUMMARY_COLUMNS`)."""
    rows = []
    for r in records:
        total = r.get("rollout_s")
        # a node that was not restarted has no engine start of this rollout
        engine = r.get("engine_start_to_healthy_s") if r.get("restarted", True) else None
        numbers = isinstance(total, float | int) and isinstance(engine, float | int)
        rows.append({
            "node": r["node"], "outcome": r.get("outcome", "?"),
            "failed_gate": r.get("failed_gate") or None,
            "rollout_s": float(total) if isinstance(total, float | int) else None,
            "engine_start_to_healthy_s": float(engine) if isinstance(engine, float | int) else None,
            "overhead_s": float(total) - float(engine) if numbers else None,  # type: ignore[arg-type]
            "message": r.get("message", ""),
        })  # fmt: skip
    return rows


def _roofline(record: Mapping[str, Any]) -> dict[str, Any]:
    path = record.get("smoke_results")
    if not path:
        reason = "no smoke benchmark results in the node's record"
        return {"node": record["node"], "results": "-", "hardware": None,
                "roofline_reason": reason, "roofline": []}  # fmt: skip
    try:
        results = load_results(path)
    except ValidationError as exc:
        return {"node": record["node"], "results": path, "hardware": None,
                "roofline_reason": str(exc), "roofline": []}  # fmt: skip
    return {"node": record["node"], "results": path, **roofline_context(results)}


def summary(records: list[dict[str, Any]]) -> str:
    """The rollout report (``templates/rollout/summary.md.j2``): a row per node, then the
    roofline of each node's smoke benchmark."""
    return render(
        "rollout/summary.md.j2",
        columns=SUMMARY_COLUMNS,
        rows=summary_rows(records),
        rooflines=[_roofline(r) for r in records if r.get("outcome") == "changed"],
    )
