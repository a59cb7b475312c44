"""``specops sweep run|plan`` and ``specops rollout gate|baseline|plain|smoke|report``.

Thin: validation errors become one line naming the field (exit 2, :mod:`specops.cli`).
Every input is checked before anything is written or restarted: the config, the
canary (a host of the inventory's ``serving`` group), a search space with at least
one candidate the engine can take, the paths, the server answering.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.engine.build import model_pin

from specops.bench.compare import count_arg, threshold_arg
from specops.bench.plan import fit_context_lengths, plan_from_mapping, read_api_key
from specops.bench.price import served_max_model_len
from specops.bench.results import load_results
from specops.errors import (
    ValidationError,
    input_dir,
    input_file,
    load_yaml_file,
    output_dir,
    output_file,
)
from specops.playbooks import ansible_tool
from specops.speculative import known_versions
from specops.templating import render
from specops.tune.apply import AnsibleApplier, generates
from specops.tune.board import gather
from specops.tune.config import MODES, SweepConfig, load_config_file
from specops.tune.output_gate import api_key_of, gate_config, reference_beside, served_model
from specops.tune.plain import DEFAULT_MAX_AGE_DAYS
from specops.tune.price import sweep_price
from specops.tune.report import model_context
from specops.tune.rollout import (
    PlainBaseline,
    load_records,
    measure_baseline,
    plain_gate,
    plain_step,
    resolve_objective,
    smoke_gate,
    smoke_step,
    summary,
)
from specops.tune.sweep import SweepResult, replay_sweep, report_sweep, run_sweep

__all__ = ["register"]

_OFF = "relative output tok/s drop that fails the gate, or off (measured, not gated)"


def register(subparsers: Any) -> None:
    sweep = subparsers.add_parser("sweep", help="find the best speculative settings on a canary")
    ssub = sweep.add_subparsers(dest="sweep_command", metavar="SUBCOMMAND", required=True)
    run = ssub.add_parser("run", help="run (or resume) a sweep from a config file")
    run.add_argument("config", type=Path, help="sweep config YAML (see docs/sweep.md)")
    run.add_argument("--out", type=Path, required=True, help="results dir (resumes when it exists)")
    run.add_argument("--mode", choices=list(MODES), help="override the config's mode")
    run.add_argument(
        "--restore", action="store_true", default=None, help="leave the canary where it started"
    )
    run.add_argument("--inventory", help="override the config's inventory")
    run.add_argument("--canary", help="override the config's canary host")
    run.add_argument("--base-url", dest="base_url", help="override the config's base_url")
    run.add_argument(
        "--json",
        action="store_true",
        help="one JSON line on stdout (pick, interval, runner-up, restarts, files); progress"
        " lines go to stderr and OUT/progress.log",
    )
    run.add_argument(
        "--api-key-file",
        dest="api_key_file",
        help="the server's API key (a 0600 file): every benchmark and readiness probe sends it",
    )
    run.set_defaults(func=_sweep_run)
    _register_sweep_report(ssub)
    _register_sweep_predict(ssub)
    _register_sweep_plan(ssub)

    rollout = subparsers.add_parser("rollout", help="decisions of playbooks/rollout.yml")
    rsub = rollout.add_subparsers(dest="rollout_command", metavar="SUBCOMMAND", required=True)
    gate = rsub.add_parser("gate", help="smoke benchmark vs the node's baseline (exit 1: failed)")
    gate.add_argument("--baseline", type=Path, required=True)
    gate.add_argument("--candidate", type=Path, required=True)
    gate.add_argument("--throughput-drop", type=threshold_arg, default=0.10, help=_OFF)
    gate.add_argument("--max-pass-drop", type=count_arg, default=0)
    gate.add_argument(
        "--plain-baseline", type=Path,
        help="the node's results without speculation: the candidate must not be slower"
        " beyond --throughput-drop (gate plain)",
    )  # fmt: skip
    _objective_arg(gate)
    gate.set_defaults(func=_gate)
    for name, text in (
        ("baseline", "measure the node's baseline unless it has one (one process)"),
        (
            "smoke",
            "smoke benchmark, gate vs the baseline, keep it as the new baseline (exit 1: failed)",
        ),
    ):
        step = rsub.add_parser(name, help=text)
        step.add_argument(
            "--base-url", required=True, help="the node's server, from the controller"
        )
        step.add_argument("--plan-json", required=True, help="the smoke plan (bench plan fields)")
        step.add_argument("--work", type=Path, required=True, help="directory for the results")
        step.add_argument("--baseline", type=Path, required=True, help="the node's baseline file")
        step.add_argument("--humaneval-limit", type=count_arg, default=0)
        step.add_argument(
            "--output-gate-json", default="true",
            help="the output gate: true, false, or its settings (threshold, max_tokens,"
            " degeneration) as JSON",
        )  # fmt: skip
        if name == "smoke":
            step.add_argument("--throughput-drop", type=threshold_arg, default=0.10, help=_OFF)
            step.add_argument("--max-pass-drop", type=count_arg, default=0)
            step.add_argument("--no-update-baseline", action="store_true")
            step.add_argument(
                "--plain-baseline", type=Path,
                help="the node's plain baseline: also gate against no speculation (gate plain)",
            )  # fmt: skip
            _objective_arg(step)
        else:
            _plain_beside_args(step)
        step.set_defaults(func=_step)
    _register_plain(rsub)
    _register_objective(rsub)
    rep = rsub.add_parser("report", help="summarise a rollout's per-node records")
    rep.add_argument("report_dir", type=Path)
    rep.add_argument("--json", action="store_true")
    rep.set_defaults(func=_report)


def _objective_arg(parser: Any) -> None:
    parser.add_argument(
        "--objective-json", default="",
        help="the objective the profile was chosen for (the sweep's objective as JSON, e.g."
        ' \'{"kind": "latency", "concurrency": 1}\'): gate plain compares on it (default:'
        " the mean output tok/s over the cells)",
    )  # fmt: skip


def _register_objective(rsub: Any) -> None:
    obj = rsub.add_parser(
        "objective",
        help="check the objective gate plain judges on against the smoke plan (nothing is"
        " measured): its label as JSON, exit 2 naming the key when it is not valid",
    )  # fmt: skip
    obj.add_argument("--plan-json", required=True, help="the smoke plan (bench plan fields)")
    _objective_arg(obj)
    obj.set_defaults(func=_objective_check)


def _objective_json(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    return _json_object(text, "--objective-json", "the sweep's objective fields") or None


def _objective_check(args: argparse.Namespace) -> int:
    objective = resolve_objective(_plan_json(args.plan_json), _objective_json(args.objective_json))
    label = objective.label if objective is not None else "mean output tok/s over the cells"
    json.dump({"ok": True, "objective": label}, sys.stdout)
    sys.stdout.write("\n")
    return 0


def _register_sweep_plan(ssub: Any) -> None:
    plan = ssub.add_parser(
        "plan",
        help="what a sweep costs before it runs: candidates and their flags, restarts, runs,"
        " each run's cells, requests and tokens, a time estimate; nothing restarts",
    )
    plan.add_argument("config", type=Path)
    plan.add_argument("--mode", choices=list(MODES))
    plan.add_argument("--base-url", dest="base_url", help="override the config's base_url")
    plan.add_argument("--inventory", help="override the config's inventory (the canary's)")
    plan.add_argument(
        "--max-model-len", type=int,
        help="the canary's context limit (else the last run's): a longer context is refused",
    )  # fmt: skip
    plan.add_argument(
        "--history", type=Path, metavar="RESULTS",
        help="a results.json of the canary's server: the time estimate and the context limit",
    )  # fmt: skip
    plan.add_argument(
        "--out", type=Path,
        help="a previous sweep's results dir: its restarts' seconds and its last run",
    )  # fmt: skip
    plan.add_argument("--json", action="store_true", help="one JSON line (the playbook reads it)")
    plan.set_defaults(func=_sweep_plan)


# A file of the inventory that does not parse, as ansible-inventory reports it (2.19:
# the message, then "Origin: <file>:<line>:<column>").
_UNPARSED = re.compile(
    r"YAML parsing failed: (?P<what>[^\n]+)\n(?:(?!\[WARNING\])[^\n]*\n)*?"
    r"Origin: (?P<where>/[^\n]+?:\d+:\d+)\n"
)


def _serving_hosts(inventory: str) -> list[str]:
    """The hosts of group ``serving`` in ``inventory``, as the applier (run in the working
    directory) resolves it; ``--graph`` reads no variables, so no vault is opened."""
    if "," not in inventory and not Path(inventory).exists():
        raise ValidationError(
            "inventory", f"no such inventory: {inventory} (from {Path.cwd()}, where it is run)"
        )
    proc = subprocess.run(
        [ansible_tool("ansible-inventory"), "-i", inventory, "--graph", "serving"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        unparsed = _UNPARSED.search(proc.stderr)
        if unparsed:  # Ansible says where, among its plugins' attempts: say that alone
            where, what = unparsed["where"], " ".join(unparsed["what"].split())
            raise ValidationError("inventory", f"{where}: YAML syntax error: {what}")
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValidationError("inventory", f"{inventory}: no group serving ({why})")
    return [
        line.split("|--", 1)[1].strip()
        for line in proc.stdout.splitlines()
        if "|--" in line and not line.split("|--", 1)[1].startswith("@")
    ]


def _check(cfg: SweepConfig) -> None:
    """What the config alone cannot say: the canary is a serving host of the inventory,
    and the space has a candidate the engine can take."""
    hosts = _serving_hosts(cfg.inventory)
    if cfg.canary not in hosts:
        near = difflib.get_close_matches(cfg.canary, hosts, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ValidationError(
            "canary",
            f"{cfg.canary!r} is not a host of group serving in {cfg.inventory}"
            f" (have: {', '.join(hosts) or 'none'}){hint}",
        )
    _same_engine(cfg)
    if cfg.candidates_bound() == 0:
        first = next((cfg.space.candidate(a).invalid for a in cfg.space.grid()), None)
        raise ValidationError(
            "space",
            f"no candidate the engine {cfg.space.engine.label} can take"
            f" (all {cfg.space.size()} refused; the first: {first})",
        )


def _canary_vars(inventory: str, canary: str) -> dict[str, Any]:
    """The canary's variables as the inventory writes them (``ansible-inventory --host``)."""
    proc = subprocess.run(
        [ansible_tool("ansible-inventory"), "-i", inventory, "--host", canary],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValidationError("inventory", f"{inventory}: cannot read {canary}'s variables ({why})")
    data = json.loads(proc.stdout or "{}")
    return data if isinstance(data, dict) else {}


def _default_pins() -> Any:
    """``inference_engine``'s default model pins (its ``defaults/main.yml``) where the
    collection carries the role (a built collection), or the checkout it is linked from;
    None when neither is readable here."""
    from ansible_collections.specops import infra  # noqa: PLC0415

    for base in (Path(p).resolve() for p in infra.__path__):
        for roles in (base / "roles", base.parents[2].parent / "roles"):
            path = roles / "inference_engine" / "defaults" / "main.yml"
            if path.is_file():
                data = load_yaml_file(path, "inference_engine defaults")
                return data.get("inference_engine_model_pins") if isinstance(data, dict) else None
    return None


def _same_engine(cfg: SweepConfig) -> None:
    """The engine is stated once, by the canary's ``inference_engine_*``: a config whose
    ``engine`` names another engine or version would sweep flags the canary's build does
    not take (refused here, before anything restarts)."""
    hv = _canary_vars(cfg.inventory, cfg.canary)
    name = hv.get("inference_engine_engine")
    if not isinstance(name, str) or not name or "{{" in name:
        return  # the inventory does not say (or says it through a template)
    pins = hv.get("inference_engine_model_pins", _default_pins())
    version = str(hv.get("inference_engine_version") or "")
    try:
        pin = model_pin(
            name, version, str(hv.get("inference_engine_model") or ""), pins,
            git_ref=str(hv.get("inference_engine_git_ref") or ""),
        )  # fmt: skip
    except ValueError:
        return  # a wrong engine name: the inventory's preflight names it
    engine = cfg.space.engine
    # the pin not readable here: the engine's name only
    wanted = engine.version if pins is None and not version else pin.version
    known = [v for v in known_versions(name) if v == wanted or v.startswith(wanted + ".")]
    wanted = known[0] if len(known) == 1 else wanted
    if (engine.name, engine.version) != (name, wanted):
        raise ValidationError(
            "engine",
            f"{engine.name} {engine.version} is not what the canary {cfg.canary} serves:"
            f" {name} {wanted} (its inference_engine_engine and _version in {cfg.inventory},"
            f" the one statement of its engine); valid: engine: {{name: {name}, version:"
            f" {wanted!r}}}, or the canary that serves {engine.name} {engine.version}",
        )


def _plain_beside_args(step: Any) -> None:
    step.add_argument(
        "--plain-baseline", type=Path,
        help="also keep the node's plain baseline in this file (a recorded one that stands;"
        " with --plain-running, else measured on the server)",
    )  # fmt: skip
    step.add_argument("--plain-max-age-days", type=float, default=DEFAULT_MAX_AGE_DAYS)
    step.add_argument(
        "--engine-version", help="the node's engine version (a recorded one must match)"
    )
    step.add_argument(
        "--plain-running", action="store_true",
        help="the node's server runs no speculation now (it may stand for the plain baseline)",
    )  # fmt: skip


def _register_plain(rsub: Any) -> None:
    plain = rsub.add_parser(
        "plain",
        help="keep the node's plain baseline: a recorded one that stands, else measure the"
        " node's server (which must run no speculation); --check-only measures nothing",
    )
    plain.add_argument("--base-url", required=True, help="the node's server, from the controller")
    plain.add_argument("--plan-json", required=True, help="the smoke plan (bench plan fields)")
    plain.add_argument("--work", type=Path, required=True, help="directory for the results")
    plain.add_argument("--plain-baseline", type=Path, required=True, help="the node's file")
    plain.add_argument("--max-age-days", type=float, default=DEFAULT_MAX_AGE_DAYS)
    plain.add_argument(
        "--engine-version", help="the node's engine version (a recorded one must match)"
    )
    plain.add_argument(
        "--check-only", action="store_true",
        help="exit 1 (and say why) when no recorded one stands, instead of measuring",
    )  # fmt: skip
    plain.set_defaults(func=_plain)


def _sweep_run(args: argparse.Namespace) -> int:
    output_dir(args.out, "--out")
    cfg = load_config_file(
        input_file(args.config, "config"),
        {"mode": args.mode, "restore": args.restore, "inventory": args.inventory,
         "canary": args.canary, "base_url": args.base_url},
    )  # fmt: skip
    if args.api_key_file:
        cfg = dataclasses.replace(cfg, plan={**cfg.plan, "api_key_file": args.api_key_file})
    key_file = cfg.plan.get("api_key_file")
    key = read_api_key(str(key_file), "--api-key-file") if key_file else None
    _check(cfg)
    _fits_the_canary(cfg)
    args.out.mkdir(parents=True, exist_ok=True)
    applier = AnsibleApplier(
        cfg.inventory, cfg.canary, cfg.base_url, cfg.served_model_name,
        log=args.out / "ansible.log", timeout=cfg.apply_timeout_s,
    )  # fmt: skip
    stream = sys.stderr if args.json else sys.stdout
    try:
        result = run_sweep(
            cfg,
            applier,
            args.out,
            ready=functools.partial(generates, api_key=key),
            log=lambda m: print(m, file=stream, flush=True),
        )
    except BaseException as exc:  # the playbook following progress.log stops waiting
        first = (str(exc).splitlines() or [""])[0]
        with (args.out / "progress.log").open("a", encoding="utf-8") as fh:
            fh.write(f"done failed: {type(exc).__name__}: {first}\n")
        raise
    return _print_result(result, as_json=args.json)


def _fits_the_canary(cfg: SweepConfig) -> None:
    """The plan's context lengths against the canary's server as it runs now, before
    anything restarts (a length it cannot take would fail the first run, after a
    restart); a server that does not answer is not checked here (the first run is)."""
    plan = cfg.bench_plan()
    limit, _ = served_max_model_len(plan)
    if limit is None:
        return
    try:
        fit_context_lengths(plan.context_lengths, plan.output_len, limit, plan.context_over_limit)
    except ValidationError as exc:
        raise ValidationError(f"plan.{exc.field}", exc.problem) from None


def _print_result(result: SweepResult, *, as_json: bool) -> int:
    """What ``sweep run`` and ``sweep report`` print; exit 1 when nothing is usable."""
    pick = result.outcome.pick
    if as_json:
        json.dump(result.summary(), sys.stdout)
        sys.stdout.write("\n")
    else:
        print(
            f"pick: {pick.candidate.key if pick else 'nothing usable'};"
            f" restarts {result.restarts_total}; leaderboard {result.files['leaderboard_md']};"
            f" snippet {result.files['snippet']}"
        )
        if result.outcome.plain_verdict:
            print(f"against no speculation: {result.outcome.plain_verdict}")
    return 0 if pick is not None else 1


def _register_sweep_report(ssub: Any) -> None:
    rep = ssub.add_parser(
        "report",
        help="write a finished sweep's leaderboard, CSV, plot and snippet again from its"
        " ledger (OUT/sweep.jsonl); nothing is measured or restarted",
    )
    rep.add_argument("config", type=Path, help="the config the sweep ran")
    rep.add_argument("--out", type=Path, required=True, help="the sweep's results dir")
    rep.add_argument("--json", action="store_true", help="one JSON line: the pick and files")
    rep.set_defaults(func=_sweep_report)


def _register_sweep_predict(ssub: Any) -> None:
    pred = ssub.add_parser(
        "predict",
        help="the depth model on a finished sweep: acceptance per position at one depth"
        " and the step cost at two predict every candidate; printed beside the measured"
        " runs with the restarts a model-guided search would have saved",
    )
    pred.add_argument("config", type=Path, help="the config the sweep ran")
    pred.add_argument("--out", type=Path, required=True, help="the sweep's results dir")
    pred.add_argument("--json", action="store_true", help="one JSON line")
    pred.set_defaults(func=_sweep_predict)


def _sweep_predict(args: argparse.Namespace) -> int:
    cfg = load_config_file(input_file(args.config, "config"))
    out = input_dir(args.out, "--out")
    if not (out / "sweep.jsonl").is_file():
        raise ValidationError(
            "--out", f"{out} holds no sweep.jsonl: give the directory `sweep run --out` wrote"
        )
    outcome, ledger = replay_sweep(cfg, out)
    views = gather(outcome, ledger, out, cfg.objective, cfg.scoring)
    context = model_context(cfg, outcome, views)
    if args.json:
        replay = context["replay"]
        json.dump(
            {
                "applies": replay is not None,
                "reason": context["model_reason"],
                "rows": context["model_rows"],
                "steps": replay.steps if replay else [],
                "measured": replay.restarts if replay else None,
                "saved": replay.saved if replay else None,
                "best_model": replay.best_model if replay else None,
                "best_grid": replay.best_measured if replay else None,
            },
            sys.stdout,
        )
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render("sweep/predict.md.j2", **context))
    return 0 if context["replay"] is not None else 1


def _sweep_report(args: argparse.Namespace) -> int:
    cfg = load_config_file(input_file(args.config, "config"))
    if not (args.out / "sweep.jsonl").is_file():
        raise ValidationError(
            "--out", f"{args.out} holds no sweep.jsonl: give the directory `sweep run --out` wrote"
        )
    return _print_result(report_sweep(cfg, args.out), as_json=args.json)


def _sweep_plan(args: argparse.Namespace) -> int:
    cfg = load_config_file(
        input_file(args.config, "config"),
        {"mode": args.mode, "base_url": args.base_url, "inventory": args.inventory},
    )
    _check(cfg)
    if args.max_model_len is not None and args.max_model_len < 1:
        raise ValidationError(
            "--max-model-len", f"must be an integer >= 1 (got {args.max_model_len})"
        )
    history = load_results(input_file(args.history, "--history")) if args.history else None
    out = input_dir(args.out, "--out") if args.out else None
    priced = sweep_price(cfg, max_model_len=args.max_model_len, history=history, out=out)
    if args.json:
        json.dump(priced.to_dict(), sys.stdout)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(render("sweep/plan.txt.j2", cfg=cfg, price=priced))
    return 0


def _gate(args: argparse.Namespace) -> int:
    baseline = input_file(args.baseline, "--baseline")
    candidate_file = input_file(args.candidate, "--candidate")
    plain_file = (
        input_file(args.plain_baseline, "--plain-baseline") if args.plain_baseline else None
    )
    candidate = load_results(candidate_file)
    result = smoke_gate(
        load_results(baseline), candidate,
        throughput_drop=args.throughput_drop, max_pass_drop=args.max_pass_drop,
    )  # fmt: skip
    if result.ok and plain_file is not None:
        objective = resolve_objective(candidate.plan, _objective_json(args.objective_json))
        result = plain_gate(
            load_results(plain_file), candidate, throughput_drop=args.throughput_drop,
            objective=objective,
        )  # fmt: skip
    json.dump(result.to_dict(), sys.stdout)
    sys.stdout.write("\n")
    return 0 if result.ok else 1


def _json_object(text: str, flag: str, fields: str) -> dict[str, Any]:
    """A command-line argument that holds a JSON object (errors name the flag)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(flag, f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValidationError(flag, f"must be a JSON object of {fields}")
    return data


def _plan_json(text: str) -> dict[str, Any]:
    return _json_object(text, "--plan-json", "bench plan fields")


def _plain(args: argparse.Namespace) -> int:
    if args.max_age_days <= 0:
        raise ValidationError("--max-age-days", f"must be > 0 (got {args.max_age_days})")
    plan = _plan_json(args.plan_json)
    plan_from_mapping({**plan, "base_url": args.base_url})  # a bad plan names its field
    output_dir(args.work, "--work")
    output_file(args.plain_baseline, "--plain-baseline")
    out = plain_step(
        plan, args.base_url, args.work, args.plain_baseline,
        max_age_days=args.max_age_days, engine_version=args.engine_version or None,
        measure_missing=not args.check_only,
    )  # fmt: skip
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0 if out["stands"] else 1


def _step(args: argparse.Namespace) -> int:
    plan = _plan_json(args.plan_json)
    try:
        gate = gate_config(json.loads(args.output_gate_json), "--output-gate-json")
    except json.JSONDecodeError as exc:
        raise ValidationError("--output-gate-json", f"not JSON: {exc}") from None
    plan_from_mapping({**plan, "base_url": args.base_url})  # a bad plan names its field
    output_dir(args.work, "--work")
    output_file(args.baseline, "--baseline")
    kept = args.baseline.exists() and (gate is None or reference_beside(args.baseline).exists())
    if args.rollout_command == "smoke" or not kept:  # the server will be asked: it answers
        try:
            served_model(args.base_url, api_key=api_key_of(plan))
        except RuntimeError as exc:
            raise ValidationError("--base-url", f"cannot reach the server: {exc}") from None
    if args.rollout_command == "baseline":
        if args.plain_max_age_days <= 0:
            raise ValidationError(
                "--plain-max-age-days", f"must be > 0 (got {args.plain_max_age_days})"
            )
        plain = (
            PlainBaseline(
                args.plain_baseline, args.plain_max_age_days, args.engine_version or None,
                args.plain_running,
            )
            if args.plain_baseline is not None
            else None
        )  # fmt: skip
        out = measure_baseline(
            plan, args.base_url, args.work, args.baseline, args.humaneval_limit, gate=gate,
            plain=plain,
        )  # fmt: skip
        ok = True
    else:
        out = smoke_step(
            plan, args.base_url, args.work, args.baseline,
            throughput_drop=args.throughput_drop, max_pass_drop=args.max_pass_drop,
            humaneval_limit=args.humaneval_limit, update_baseline=not args.no_update_baseline,
            gate=gate, plain=args.plain_baseline,
            objective=_objective_json(args.objective_json),
        )  # fmt: skip
        ok = bool(out["ok"])
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0 if ok else 1


def _report(args: argparse.Namespace) -> int:
    records = load_records(input_dir(args.report_dir, "report_dir"))
    if args.json:
        json.dump(records, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(summary(records))
    return 0
