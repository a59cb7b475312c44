"""``specops bench``: run a plan, write a report, compare two runs.

``run`` exits 0 when every cell is ``ok``, 1 when a cell failed or was partial (the
results are still written), 2 on bad input or an unreachable server (one line naming
the field or URL; every path is checked first, and the run directory is made only once
the server answered, so a refused run leaves nothing behind), 130 (Ctrl-C) or 143
(SIGTERM) when interrupted: the finished cells are kept in the run directory and
``--resume DIR`` measures the rest. ``--json``
prints one JSON line (results path, report path, failed cells) and nothing else, for
playbooks; progress goes to ``progress.log`` in the run directory either way.
``--reuse --server-instance ID`` measures nothing when a finished run under ``--out``
measured the same plan against the same server process (``specops.bench.reuse``): it
prints that run (``"reused": true``) instead. ``compare`` exits 1 on a regression.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from specops.bench.compare import Thresholds, compare, count_arg, threshold_arg
from specops.bench.intervals import Estimate
from specops.bench.load_cli import add_load_parser
from specops.bench.plan import Plan, load_plan, plan_from_mapping
from specops.bench.price import price, served_max_model_len
from specops.bench.report import write_report
from specops.bench.results import Results, RunStore, load_results
from specops.bench.reuse import find_standing, last_run
from specops.bench.runner import RunState, new_run_id, run_plan
from specops.bench.sidebyside import (
    RunSet,
    delta_rows,
    load_run_set,
    run_set_files,
    write_comparison,
)
from specops.errors import ValidationError, input_dir, input_file, output_dir, output_file
from specops.templating import estimate, fmt, render

T = TypeVar("T")

__all__ = ["register"]


def register(subparsers: Any) -> None:
    bench = subparsers.add_parser("bench", help="benchmark an LLM server (matrix, report)")
    sub = bench.add_subparsers(dest="bench_command", metavar="ACTION", required=True)

    run = sub.add_parser("run", help="run a benchmark plan against a server")
    _plan_arguments(run)
    run.add_argument("--out", default="results", help="results root (default ./results)")
    run.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue an interrupted run (its plan, its server): only missing cells",
    )
    run.add_argument(
        "--server-instance",
        metavar="ID",
        help="the serving process measured (e.g. its systemd InvocationID), recorded",
    )
    run.add_argument(
        "--reuse",
        action="store_true",
        help="measure nothing when a finished run under --out measured this plan against "
        "this --server-instance with no failures: its results stand",
    )
    run.add_argument("--json", action="store_true", help="quiet; print one JSON line")
    run.add_argument("--fail-fast", action="store_true", help="stop after a failing cell")
    run.add_argument("--no-report", action="store_true", help="write only results.json")
    run.set_defaults(func=_cmd_run)

    preview = sub.add_parser(
        "plan",
        help="what a plan costs before it runs: cells, requests, tokens, time estimate;"
        " a context beyond the server's limit is refused here",
    )
    _plan_arguments(preview)
    preview.add_argument(
        "--max-model-len", type=int, help="the server's context limit (else --ask-server, else"
        " the last run of the server under --out)",
    )  # fmt: skip
    preview.add_argument(
        "--ask-server", action="store_true",
        help="read max_model_len from the server's /v1/models (a plan dials nothing otherwise)",
    )  # fmt: skip
    preview.add_argument(
        "--history", metavar="RESULTS",
        help="results.json (or run directory) of the last run of this server: the time"
        " estimate and the context limit (default: the newest under --out)",
    )  # fmt: skip
    preview.add_argument("--out", default="results", help="results root to find the last run in")
    preview.add_argument("--json", action="store_true", help="one JSON line")
    preview.set_defaults(func=_cmd_plan)

    rep = sub.add_parser("report", help="write report.md, CSV and PNGs from results JSON")
    rep.add_argument("results", help="results.json")
    rep.add_argument("--out", help="directory (default: next to the results)")
    rep.add_argument("--gpu-bandwidth-gbs", type=float)
    rep.add_argument("--model-bytes-per-token", type=float)
    rep.add_argument(
        "--plain",
        metavar="RESULTS",
        help="results.json of the same plan without speculation: adds the speed-up over it"
        " per cell (speedup.csv and a table)",
    )
    rep.set_defaults(func=_cmd_report)

    cmp_ = sub.add_parser(
        "compare",
        help="runs side by side: a delta table with intervals against the first (the"
        " baseline), overlay plots with --out; exit 1 when one regresses (the gate)",
    )
    cmp_.add_argument(
        "runs", nargs="+", metavar="RUN",
        help="results.json, a run directory, or a sweep candidate's runs/<key>/ (its runs"
        " pooled); the first is the baseline",
    )  # fmt: skip
    cmp_.add_argument("--out", help="write compare.md, compare.csv and overlay plots here")
    off = " (a fraction, or off: measured, not gated)"
    cmp_.add_argument(
        "--throughput-drop", type=threshold_arg, default=Thresholds.throughput_drop, help=off
    )
    cmp_.add_argument(
        "--latency-rise", type=threshold_arg, default=Thresholds.latency_rise, help=off
    )
    cmp_.add_argument(
        "--acceptance-drop", type=threshold_arg, default=Thresholds.acceptance_drop, help=off
    )
    cmp_.add_argument("--max-pass-drop", type=count_arg, default=Thresholds.max_pass_drop)
    cmp_.add_argument("--json", action="store_true")
    cmp_.set_defaults(func=_cmd_compare)

    add_load_parser(sub)  # specops.bench.load: a steady load, every failure reported


def _plan_arguments(parser: Any) -> None:
    """The flags that make or override a plan (``run`` and ``plan`` share them)."""
    parser.add_argument(
        "--plan", help="plan file (YAML or JSON; - reads standard input); flags override its fields"
    )
    parser.add_argument(
        "--save-plan",
        metavar="PATH",
        help="also write the plan as given (before flags) to PATH, e.g. for a later gate",
    )
    parser.add_argument("--base-url", help="server URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--api", choices=["completions", "chat", "sglang-generate"])
    parser.add_argument("--model")
    parser.add_argument("--concurrency", help="comma list, e.g. 1,2,4,8")
    parser.add_argument("--context-lengths", help="comma list, e.g. 1K,8K,30K")
    parser.add_argument("--output-len", type=int)
    parser.add_argument("--requests-per-cell", type=int)
    parser.add_argument(
        "--waves-per-cell", type=int, help="a cell sends at least waves x C requests (0: off)"
    )
    parser.add_argument("--warmup-per-cell", type=int)
    parser.add_argument("--prompt-set", choices=["mixed", "chat", "coding"])
    parser.add_argument("--prompt-file")
    parser.add_argument("--seed", type=int)
    parser.add_argument(
        "--temperature",
        type=float,
        help="opt-in; default sends none (server default). 0 inflates acceptance",
    )
    parser.add_argument(
        "--ignore-eos", action="store_true", default=None, help="opt-in; inflates numbers"
    )
    parser.add_argument("--tokenizer-path", help="tokenizer.json when the server has no /tokenize")
    parser.add_argument(
        "--roofline-gpu",
        help="the server's cards for the roofline (GPU catalogue key); overrides the plan's",
    )
    parser.add_argument("--roofline-gpu-count", type=int, help="how many cards the server has")
    parser.add_argument(
        "--context-over-limit", choices=["refuse", "clip", "drop"],
        help="a context length beyond the server's max_model_len: refuse (the default when"
        " lengths are given), clip it to the limit, or drop it",
    )  # fmt: skip
    parser.add_argument(
        "--warmup-waves", type=int,
        help="full waves at every cell before the first measured one (default 1; 0: off)",
    )  # fmt: skip
    parser.add_argument("--humaneval", action="store_true", help="also run HumanEval pass@1")
    parser.add_argument("--humaneval-limit", type=int)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    values: dict[str, Any] = {
        "base_url": args.base_url,
        "api": args.api,
        "model": args.model,
        "concurrency": args.concurrency,
        "context_lengths": args.context_lengths,
        "output_len": args.output_len,
        "requests_per_cell": args.requests_per_cell,
        "waves_per_cell": args.waves_per_cell,
        "warmup_per_cell": args.warmup_per_cell,
        "prompt_set": args.prompt_set,
        "prompt_file": args.prompt_file,
        "seed": args.seed,
        "temperature": args.temperature,
        "ignore_eos": args.ignore_eos,
        "tokenizer_path": args.tokenizer_path,
        "context_over_limit": args.context_over_limit,
        "warmup_waves": args.warmup_waves,
    }
    if args.humaneval or args.humaneval_limit:
        values["humaneval"] = {"enabled": True}
        if args.humaneval_limit:
            values["humaneval"]["limit"] = args.humaneval_limit
    return {k: v for k, v in values.items() if v is not None}


def _progress_line(state: RunState) -> str:
    eta = state.eta_s
    return (
        f"cells {state.cells_done}/{state.cells_total} ({state.cell_label}) | "
        f"failed requests {state.failures} | elapsed {fmt(state.elapsed_s, 0)} s | "
        f"ETA {'?' if eta is None else fmt(eta, 0) + ' s'}"
    )


class _ProgressLog:
    """One line per finished cell in ``progress.log`` (``tail -f`` it, or a playbook)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done = -1
        self.noted = False

    def __call__(self, state: RunState) -> None:
        if state.notes and not self.noted:  # lengths clipped or dropped: said at once
            self.noted = True
            with self.path.open("a", encoding="utf-8") as fh:
                for note in state.notes:
                    fh.write(f"note: {note}\n")
                    print(f"specops bench run: note: {note}", file=sys.stderr)
        if state.cells_done == self.done:
            return
        self.done = state.cells_done
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(_progress_line(state) + "\n")


class _Signals:
    """The stop signal a run received (SIGINT or SIGTERM), None while it runs."""

    received: int | None = None


async def _cancel_on_signals(coro: Coroutine[Any, Any, T], signals: _Signals) -> T:
    """Ctrl-C and SIGTERM cancel the run from the event loop: finished cells kept.

    Both go through the loop's own handler, which runs between callbacks.
    ``asyncio.run``'s SIGINT handler runs between bytecodes instead: a cancel landing
    inside a socket-connect callback logs an ``InvalidStateError`` traceback (CPython
    3.11). A second Ctrl-C finds Python's default handler back and stops at once. As
    ``asyncio.run``, it leaves SIGINT alone where Python did not install its handler
    (a process started with SIGINT ignored).
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None  # run by asyncio.run

    def stop(signum: int) -> None:
        signals.received = signum
        if signum == signal.SIGINT:
            loop.remove_signal_handler(signal.SIGINT)
        task.cancel()

    handled = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        handled.append(signal.SIGINT)
    for signum in handled:
        loop.add_signal_handler(signum, stop, signum)
    try:
        return await coro
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)


def _run(
    plan: Plan, store: RunStore, fail_fast: bool, quiet: bool, instance: str | None
) -> Results:
    """The run's results; KeyboardInterrupt after Ctrl-C, CancelledError after SIGTERM."""
    signals = _Signals()
    try:
        return _run_loop(plan, store, fail_fast, quiet, instance, signals=signals)
    except asyncio.CancelledError:
        if signals.received == signal.SIGINT:
            raise KeyboardInterrupt from None
        raise


def _run_loop(
    plan: Plan,
    store: RunStore,
    fail_fast: bool,
    quiet: bool,
    instance: str | None,
    *,
    signals: _Signals,
) -> Results:
    # The runner makes the run directory once the server answered (RunStore.start).
    log = _ProgressLog(store.dir / "progress.log")
    if quiet:
        return asyncio.run(
            _cancel_on_signals(
                run_plan(plan, log, fail_fast, store, server_instance=instance), signals
            )
        )
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("cells | in flight {task.fields[in_flight]:>3} | {task.fields[tok_s]:>8} tok/s"),
        TextColumn("| failed {task.fields[failed]}"),
        TimeElapsedColumn(),
        TextColumn("| ETA {task.fields[eta]}"),
        transient=False,
    ) as progress:
        task = progress.add_task("bench", total=None, in_flight=0, tok_s="-", failed=0, eta="?")

        def observe(state: RunState) -> None:
            log(state)
            eta = state.eta_s
            progress.update(
                task,
                total=state.cells_total,
                completed=state.cells_done,
                description=state.cell_label or "bench",
                in_flight=state.in_flight,
                tok_s=fmt(state.live_tok_s),
                failed=state.failures,
                eta="?" if eta is None else f"{fmt(eta, 0)} s",
            )

        return asyncio.run(
            _cancel_on_signals(
                run_plan(plan, observe, fail_fast, store, server_instance=instance), signals
            )
        )


def _hardware(plan: Plan, gpu: str | None, count: int | None) -> Plan:
    """The plan with the server's cards named on the command line (the rest of its
    roofline section, model weights included, kept): a migrated container's new node."""
    if gpu is None and count is None:
        return plan
    section = plan.to_dict().get("roofline") or {}
    if gpu is not None:
        section["gpu"] = gpu
        section.pop("unknown", None)
    if count is not None:
        section["gpu_count"] = count
    return plan_from_mapping({**plan.to_dict(), "roofline": section})


def _resume_plan(args: argparse.Namespace) -> tuple[Plan, RunStore]:
    store = RunStore(input_dir(args.resume, "--resume"))
    if not store.exists():
        raise ValidationError("--resume", f"{args.resume} is not a run directory (no run.json)")
    given = [k for k, v in _overrides(args).items() if k != "humaneval" or v]
    if args.plan or given:
        raise ValidationError(
            "--resume",
            "a resumed run keeps its own plan; drop "
            + ", ".join(["--plan"] * bool(args.plan) + [f"--{k.replace('_', '-')}" for k in given]),
        )
    return plan_from_mapping(store.load().plan), store


def _print_run(args: argparse.Namespace, store: RunStore, results: Results, **extra: Any) -> int:
    """The run's outcome: one JSON line (--json) or the paths; exit 1 when a cell failed."""
    path = store.results_path
    report = store.dir / "report.md"
    has_report = not args.no_report and report.is_file()
    failed = [f"c{c.concurrency}-ctx{c.context_tokens}" for c in results.failed_cells]
    if args.json:
        print(
            json.dumps(
                {
                    "results": str(path),
                    "report": str(report) if has_report else None,
                    "plots": sorted(str(png) for png in store.dir.glob("*.png")),
                    "run_id": results.run_id,
                    "cells": len(results.cells),
                    "failed_cells": failed,
                    **extra,
                }
            )
        )
    else:
        if extra.get("reused"):
            print(f"measured nothing: {results.run_id} stands (same plan, same server instance)")
        print(f"results: {path}")
        if has_report:
            print(f"report:  {report}")
        if failed:
            print(f"cells with failures: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _cmd_run(args: argparse.Namespace) -> int:
    if args.reuse and args.resume:
        raise ValidationError("--reuse", "cannot be combined with --resume")
    reuse_reason = ""
    if args.resume:
        plan, store = _resume_plan(args)
    else:
        _check_paths(args)
        plan = _plan_of(args)
        if args.reuse:
            standing = find_standing(Path(args.out), plan, args.server_instance or "")
            if standing.store is not None:
                reused = load_results(standing.store.results_path)
                # Its results finished but its report did not (the run was killed, or
                # failed, while writing it): the report is written from them now.
                if not args.no_report and not (standing.store.dir / "report.md").is_file():
                    write_report(reused, standing.store.dir)
                return _print_run(args, standing.store, reused, reused=True)
            reuse_reason = standing.reason
        store = RunStore(Path(args.out) / new_run_id())
    try:
        results = _run(plan, store, args.fail_fast, args.json, args.server_instance)
    except (KeyboardInterrupt, asyncio.CancelledError) as exc:
        if store.exists():
            kept = len(store.load().cells)
            print(
                f"specops: interrupted; {kept} finished cell(s) kept in {store.dir}; "
                f"continue with: specops bench run --resume {store.dir}",
                file=sys.stderr,
            )
        else:
            print(
                f"specops: interrupted before the run began; nothing kept under {store.dir.parent}",
                file=sys.stderr,
            )
        return 130 if isinstance(exc, KeyboardInterrupt) else 143
    if not args.no_report:
        write_report(load_results(store.results_path), store.dir)
    extra: dict[str, Any] = {"reused": False}
    if args.reuse:
        extra["not_reused"] = reuse_reason
    return _print_run(args, store, results, **extra)


def _check_paths(args: argparse.Namespace) -> None:
    """The paths a new run reads or writes, before anything is read or made (the plan's
    own: :func:`_plan_of`)."""
    for name in ("prompt_file", "tokenizer_path"):
        if getattr(args, name):
            input_file(getattr(args, name), f"--{name.replace('_', '-')}")
    output_dir(args.out, "--out")


def _plan_of(args: argparse.Namespace) -> Plan:
    """The plan the flags (and ``--plan``) give, every path checked first."""
    if args.plan and args.plan != "-":
        input_file(args.plan, "--plan")
    if args.save_plan:
        if not args.plan:
            raise ValidationError(
                "--save-plan",
                "needs --plan: it keeps the plan file as given (flags alone have no file to"
                " keep); write the plan to a file and pass it with --plan",
            )
        output_file(args.save_plan, "--save-plan")
    overrides = _overrides(args)
    plan = (
        load_plan(args.plan, overrides, save_to=args.save_plan)
        if args.plan
        else plan_from_mapping(overrides)
    )
    return _hardware(plan, args.roofline_gpu, args.roofline_gpu_count)


def _cmd_plan(args: argparse.Namespace) -> int:
    plan = _plan_of(args)
    history = None
    if args.history:
        path = Path(args.history)
        path = path / "results.json" if path.is_dir() else path
        history = load_results(input_file(str(path), "--history"))
    else:
        history = last_run(Path(args.out), plan.base_url, plan.model)
    limit, source = args.max_model_len, "--max-model-len"
    if limit is not None and limit < 1:
        raise ValidationError("--max-model-len", f"must be an integer >= 1 (got {limit})")
    if limit is None and args.ask_server:
        limit, source = served_max_model_len(plan)
        if limit is None:
            raise ValidationError("--ask-server", source)
    if limit is None and history is not None and history.server.max_model_len:
        limit, source = history.server.max_model_len, f"the last run, {history.run_id}"
    priced = price(plan, max_model_len=limit, history=history)
    if args.json:
        print(json.dumps({**priced.to_dict(), "max_model_len_from": source if limit else None}))
        return 0
    print(render("bench/plan.txt.j2", plan=plan, price=priced, limit_from=source), end="")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    out = output_dir(args.out, "--out") if args.out else Path(args.results).parent
    results = load_results(input_file(args.results, "results"))
    plain = load_results(input_file(args.plain, "--plain")) if args.plain else None
    print(write_report(results, out, args.gpu_bandwidth_gbs, args.model_bytes_per_token, plain))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    if len(args.runs) < 2:
        raise ValidationError("RUN", "give at least two runs: the baseline, then the others")
    out = output_dir(args.out, "--out") if args.out else None
    names = ["baseline", *(f"RUN[{i}]" for i in range(2, len(args.runs) + 1))]
    for spec, name in zip(args.runs, names, strict=True):  # every path, before any is read
        run_set_files(spec, name)
    sets = [load_run_set(spec, name) for spec, name in zip(args.runs, names, strict=True)]
    _unique_labels(sets)
    thresholds = Thresholds(
        throughput_drop=args.throughput_drop,
        latency_rise=args.latency_rise,
        acceptance_drop=args.acceptance_drop,
        max_pass_drop=args.max_pass_drop,
    )
    baseline = sets[0]
    findings = {s.label: compare(baseline.latest, s.latest, thresholds) for s in sets[1:]}
    regressions = [f for items in findings.values() for f in items if f.regression]
    report = write_comparison(sets, out, findings) if out is not None else None
    if args.json:
        rows = [row for s in sets[1:] for row in delta_rows(baseline, s)]
        print(
            json.dumps(
                {
                    "regressions": len(regressions),
                    "findings": [f.__dict__ for items in findings.values() for f in items],
                    "runs": [s.label for s in sets],
                    "deltas": [
                        {k: (v.to_dict() if isinstance(v, Estimate) else v) for k, v in r.items()}
                        for r in rows
                    ],
                    "report": str(report) if report else None,
                }
            )
        )
        return 1 if regressions else 0
    for other in sets[1:]:
        print(f"{other.label} vs {baseline.label} (baseline):")
        for row in delta_rows(baseline, other):
            print(
                f"  c{row['concurrency']}-ctx{row['context_tokens']}: out tok/s"
                f" {estimate(row['output_tok_s'])} vs {estimate(row['baseline_output_tok_s'])},"
                f" x {estimate(row['output_ratio'], 3)} ({row['verdict']}); TPOT p50"
                f" x {estimate(row['tpot_ratio'], 3)}; accept len"
                f" {fmt(row['mean_acceptance_length'], 3)} vs"
                f" {fmt(row['baseline_mean_acceptance_length'], 3)}"
            )
        for f in findings[other.label]:
            change = "-" if f.change is None else f"{f.change:+.3f}"
            mark = "REGRESSION" if f.regression else "ok"
            print(
                f"{mark:10} {f.where:18} {f.metric:24} {fmt(f.baseline, 3):>10} -> "
                f"{fmt(f.candidate, 3):>10} ({change}) {f.note}"
            )
    if report is not None:
        print(f"report: {report}")
    print(f"{len(regressions)} regression(s)")
    return 1 if regressions else 0


def _unique_labels(sets: list[RunSet]) -> None:
    """Sets named alike (two results.json of the same name) get their position added."""
    seen: dict[str, int] = {}
    for s in sets:
        seen[s.label] = seen.get(s.label, 0) + 1
    for i, s in enumerate(sets, start=1):
        if seen[s.label] > 1:
            s.label = f"{s.label} ({i})"
