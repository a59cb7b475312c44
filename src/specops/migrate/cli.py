"""``specops migrate preflight|move|record|report``: the controller side of
``playbooks/migrate.yml``, usable without Ansible. Exit 0 on success, 1 when a check or
the move fails (the message names what is missing or where the CT is), 2 on bad input
(one line naming the argument or the spec's key, before anything is asked or recorded)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from specops.errors import (
    SpecopsError,
    ValidationError,
    input_dir,
    input_file,
    output_file,
    syntax_problem,
)
from specops.migrate.client import PveClient
from specops.migrate.move import move
from specops.migrate.preflight import (
    PreflightResult,
    ct_gpu_lines,
    gather_local_facts,
    preflight,
    source_gone,
)
from specops.migrate.report import render_markdown, summarize
from specops.migrate.spec import MigrationSpec, parse_spec
from specops.migrate.state import MigrationState, load_state

__all__ = ["register"]


def _json_file(path: str, field: str) -> dict[str, Any]:
    """The JSON object in ``path``, else ValidationError naming ``field``."""
    try:
        data = json.loads(input_file(path, field).read_text())
    except OSError as exc:
        raise ValidationError(field, f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValidationError(field, f"{path} is not JSON: {syntax_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ValidationError(field, f"{path} must hold a JSON object")
    return data


def _stdin_bundle(args: argparse.Namespace) -> dict[str, Any]:
    """``--stdin``: the spec, the token secret and the nodes' facts in one JSON object on
    standard input, read once (a check run writes no file for them)."""
    cached = getattr(args, "_bundle", None)
    if cached is not None:
        return dict(cached)
    try:
        data = json.loads(sys.stdin.read() or "null")
    except OSError as exc:
        raise ValidationError("--stdin", f"cannot read standard input ({exc})") from None
    except ValueError as exc:
        raise ValidationError(
            "--stdin", f"standard input is not JSON: {syntax_problem(exc)}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
        raise ValidationError(
            "--stdin", "must be a JSON object with spec (and facts, token_secret)"
        )
    args._bundle = data
    return data


def _facts(
    path: str | None,
    root: str | None,
    running: set[int] | None = None,
    side: str = "target",
    bundle: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    given = ((bundle or {}).get("facts") or {}).get(side) if bundle else None
    given = given if isinstance(given, dict) else None  # none gathered (a gone source)
    if path or given is not None:
        data = given if given is not None else _json_file(str(path), f"--{side}-facts")
        facts = data.get("ansible_facts", {}).get("specops_gpu", data)
        if not isinstance(facts, dict) or not isinstance(facts.get("gpus", []), list):
            raise ValidationError(
                f"--{side}-facts", f"{path or 'stdin'} holds no gpu_facts result (specops_gpu.gpus)"
            )
        return facts
    if root:
        return gather_local_facts(root, sorted(running) if running is not None else None)
    return None


def _clients(spec: MigrationSpec) -> tuple[PveClient, PveClient | None]:
    return PveClient(spec.api), PveClient(spec.target_api) if spec.target_api else None


def _check_paths(args: argparse.Namespace) -> None:
    """Every path argument, before the spec is read or anything asked."""
    for side in ("target", "source"):
        path = getattr(args, f"{side}_facts", None)
        if path:  # read here too, so a bad file is named before the API is asked
            _facts(path, None, side=side)
    for name in ("target_root", "source_root"):
        if getattr(args, name, None):
            input_dir(getattr(args, name), f"--{name.replace('_', '-')}")
    if getattr(args, "markdown", None):
        output_file(args.markdown, "--markdown")


def _load(args: argparse.Namespace) -> tuple[MigrationSpec, MigrationState]:
    _check_paths(args)
    if getattr(args, "stdin", False):
        bundle = _stdin_bundle(args)
        data = dict(bundle["spec"])
        if bundle.get("token_secret") and isinstance(data.get("api"), dict):
            data["api"] = {**data["api"], "token_secret": str(bundle["token_secret"])}
        spec = parse_spec(data)
    elif args.spec:
        spec = parse_spec(_json_file(args.spec, "--spec"))
    else:
        raise ValidationError("--spec", "give the spec file, or --stdin")
    return spec, load_state(Path(spec.state_dir), spec.vmid)


def _bundle(args: argparse.Namespace) -> dict[str, Any] | None:
    return _stdin_bundle(args) if getattr(args, "stdin", False) else None


def _pre_from_state(state: MigrationState) -> PreflightResult:
    return PreflightResult.from_dict(state.phase("preflight"))


def _cmd_preflight(args: argparse.Namespace) -> int:
    spec, state = _load(args)
    client, tclient = _clients(spec)
    if args.dry_run:  # a check run: the same checks, nothing recorded
        running = (tclient or client).running_vms(spec.target) if args.target_root else None
        tfacts = _facts(args.target_facts, args.target_root, running, bundle=_bundle(args))
        return _show_preflight(preflight(spec, client, tfacts, target_client=tclient), args)
    with state.timed("preflight") as entry:
        running = (tclient or client).running_vms(spec.target) if args.target_root else None
        tfacts = _facts(args.target_facts, args.target_root, running)
        sfacts = _facts(args.source_facts, args.source_root, side="source")
        keep: dict[str, Any] = {k: entry[k] for k in ("status", "started") if k in entry}
        if state.phase("move").get("action") in ("migrated", "restored", "recreate", "skipped"):
            # a re-run after the move: keep what the first preflight saw on the source
            result = _pre_from_state(state)
            fresh = preflight(spec, client, tfacts, target_client=tclient)
            result.checks, result.already_on_target = fresh.checks, fresh.already_on_target
        else:
            result = preflight(spec, client, tfacts, target_client=tclient)
            if sfacts is not None:
                state.data["source_facts"] = sfacts
        entry.clear()
        entry.update(keep)
        entry.update(result.to_dict())
        if sfacts is not None and not state.data.get("source_cards"):
            minors = {
                int(m)
                for line in result.source_gpu_lines
                for m in re.findall(r"/dev/nvidia(\d+)\b", line)
            }
            state.data["source_cards"] = [
                f"{g['address']} {g['name']}"
                for g in sfacts.get("gpus", [])
                if (g.get("nvidia") or {}).get("minor") in minors
            ]
    return _show_preflight(result, args)


def _show_preflight(result: PreflightResult, args: argparse.Namespace) -> int:
    out = result.to_dict()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for c in result.checks:
            print(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.message}")
    if not result.ok:
        print("preflight failed: " + " | ".join(result.failures()), file=sys.stderr)
        return 1
    return 0


def _cmd_move(args: argparse.Namespace) -> int:
    spec, state = _load(args)
    pre = state.phase("preflight")
    if not pre.get("ok"):
        print(
            "move: the preflight has not passed for this migration (run specops migrate preflight)",
            file=sys.stderr,
        )
        return 1
    client, tclient = _clients(spec)
    outcome = move(spec, client, state, _pre_from_state(state), target_client=tclient)
    result = _pre_from_state(state)
    out = {
        "action": outcome.action,
        "message": outcome.message,
        "notes": outcome.notes,
        "target_start_failed": outcome.target_start_failed,
        "changed": outcome.action not in ("skipped", "recreate"),
        "recovery": result.recovery,
        # The GPU lines the GPU phase cleans up: the source's (a restore: the backup's).
        "source_gpu_lines": state.phase("move").get("source_gpu_lines") or result.source_gpu_lines,
    }
    print(
        json.dumps(out, indent=2)
        if args.json
        else outcome.message + "".join(f"\n  {n}" for n in outcome.notes)
    )
    return 0


def _cmd_locate(args: argparse.Namespace) -> int:
    """Whether the source node is up (a normal move) or gone (restore or re-create):
    read-only, for the playbook to know which nodes it can reach."""
    spec, _state = _load(args)
    client, _tclient = _clients(spec)
    why = source_gone(spec, client) if spec.source and spec.mode == "migrate" else None
    out = {"source": spec.source, "gone": why is not None, "why": why or ""}
    print(json.dumps(out) if args.json else (why or f"{spec.source} is online"))
    return 0


def _cmd_start(args: argparse.Namespace) -> int:
    """Start the CT on the target when it is stopped (after a move whose start failed)."""
    spec, _state = _load(args)
    client, tclient = _clients(spec)
    api = tclient or client
    where = api.where_is(spec.vmid)
    if where is None or where[0] != spec.target:
        print(f"start: CT {spec.vmid} is not on {spec.target} ({where})", file=sys.stderr)
        return 1
    changed = where[1] != "running"
    if changed:
        path = {"node": spec.target, "vmid": spec.vmid}
        upid = str(api.call("POST", "/nodes/{node}/lxc/{vmid}/status/start", path))
        res = api.wait_task(spec.target, upid, timeout=spec.task_timeout)
        if not res.ok:
            log = "\n".join(f"  {line}" for line in res.log[-40:])
            print(
                f"start of CT {spec.vmid} on {spec.target} failed: {res.exitstatus}\n{log}",
                file=sys.stderr,
            )
            return 1
    out = {"changed": changed, "message": f"CT {spec.vmid} runs on {spec.target}"}
    print(json.dumps(out) if args.json else out["message"])
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    try:
        info = json.loads(args.info) if args.info else {}
    except json.JSONDecodeError as exc:
        raise ValidationError("--info", f"not JSON: {syntax_problem(exc)}") from None
    if not isinstance(info, dict):
        raise ValidationError("--info", f"must be a JSON object (got {args.info})")
    _spec, state = _load(args)
    state.record(args.phase, args.seconds, **info)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    spec, state = _load(args)
    client, tclient = _clients(spec)
    api = tclient or client
    lines = ct_gpu_lines(api.ct_config(spec.target, spec.vmid))
    running = api.running_vms(spec.target) if args.target_root else None
    summary = summarize(state, lines, _facts(args.target_facts, args.target_root, running))
    state.data["report"] = summary
    state.save()
    text = render_markdown(summary)
    if args.markdown:
        Path(args.markdown).write_text(text)
    print(json.dumps(summary, indent=2) if args.json else text)
    return 0


def _run(func: Any) -> Any:
    def wrapper(args: argparse.Namespace) -> int:
        try:
            rc: int = func(args)
        except ValidationError:
            raise  # bad input: one line and exit 2 (specops.cli)
        except SpecopsError as exc:  # a check or the move failed
            print(f"migrate: {exc}", file=sys.stderr)
            return 1
        return rc

    return wrapper


def register(subparsers: Any) -> None:
    """``specops migrate ...``."""
    parser = subparsers.add_parser(
        "migrate", help="migrate a serving container to another PVE node"
    )
    sub = parser.add_subparsers(dest="migrate_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--spec",
            help="migration spec (JSON: the inventory's migrate_* settings)",
        )
        p.add_argument(
            "--stdin", action="store_true",
            help="read {spec, token_secret, facts: {target, source}} as JSON from standard"
            " input instead of files (a check run writes nothing)",
        )  # fmt: skip
        p.add_argument("--json", action="store_true", help="print JSON")

    def facts(p: argparse.ArgumentParser) -> None:
        p.add_argument("--target-facts", help="JSON of the target's specops.infra.gpu_facts result")
        p.add_argument(
            "--target-root", help="read the target's GPU facts from this node root (lab)"
        )

    p = sub.add_parser("preflight", help="read-only checks; every failure names what is missing")
    common(p)
    facts(p)
    p.add_argument("--source-facts", help="JSON of the source's gpu_facts result (for the report)")
    p.add_argument("--source-root", help="read the source's GPU facts from this node root (lab)")
    p.add_argument(
        "--dry-run", action="store_true", help="check only; record nothing in the state file"
    )
    p.set_defaults(func=_run(_cmd_preflight))
    p = sub.add_parser("move", help="migrate (restart mode) or vzdump + restore; resumable")
    common(p)
    p.set_defaults(func=_run(_cmd_move))
    p = sub.add_parser("locate", help="is the source node up (normal) or gone (recovery)?")
    common(p)
    p.set_defaults(func=_run(_cmd_locate))
    p = sub.add_parser("start", help="start the CT on the target when it is stopped")
    common(p)
    p.set_defaults(func=_run(_cmd_start))
    p = sub.add_parser("record", help="record a phase run elsewhere (seconds, info JSON)")
    common(p)
    p.add_argument("--phase", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--info", help="JSON object kept with the phase")
    p.set_defaults(func=_run(_cmd_record))
    p = sub.add_parser("report", help="what changed and the timings per phase")
    common(p)
    facts(p)
    p.add_argument("--markdown", help="also write the report as Markdown here")
    p.set_defaults(func=_run(_cmd_report))
