"""``specops profile``: render a speculative profile, print the table, check a drafter.

specops profile render --engine sglang --version 0.5.11 --profile FILE.yml [--flags FLAGSET.json]
    [--target-model DIR]
specops profile table [--check docs/speculative.md | --write docs/speculative.md]
specops profile check-drafter --target DIR|HUB_ID --drafter DIR|HUB_ID [--hub-cache DIR]
    [--method M] [--id HUB_ID] [--window 2048]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import (
    ENGINE_NAMES,
    Engine,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import (
    TargetModel,
    launch,
)

from specops.errors import (
    SpecopsError,
    ValidationError,
    input_dir,
    input_file,
    load_yaml_file,
    syntax_problem,
)
from specops.speculative.drafter import (
    DRAFTER_METHODS,
    HUB_ID,
    check,
    default_hub_cache,
    fetch_hint,
    resolve,
)
from specops.speculative.table import check_file, render_table, write_file

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("profile", help="speculative decoding profiles")
    sub = parser.add_subparsers(dest="profile_command", metavar="SUBCOMMAND", required=True)

    render = sub.add_parser("render", help="print the engine flags for a profile")
    render.add_argument("--engine", required=True, choices=ENGINE_NAMES)
    render.add_argument("--version", required=True, help="engine version, e.g. 0.5.11")
    render.add_argument(
        "--capability", action="append", default=[], help="branch-build capability (ddtree)"
    )
    render.add_argument(
        "--profile",
        required=True,
        type=Path,
        help="YAML/JSON file: the profile mapping, or a mapping with a 'speculative' key",
    )
    render.add_argument(
        "--flags",
        type=Path,
        help="an installed build's flag set (<venv>/.specops-engine-flags.json): check against"
        " it and read its capabilities, instead of the release's recorded list",
    )
    render.add_argument(
        "--target-model",
        help="the served model as the unit passes it (a directory with config.json, or a hub"
        " id): what its architecture needs is rendered (SGLang NEXTN's draft path)",
    )
    render.add_argument(
        "--format", choices=("shell", "json"), default="shell", help="shell line or JSON list"
    )
    render.set_defaults(func=_render)

    table = sub.add_parser("table", help="print the method x engine -> flags table")
    mode = table.add_mutually_exclusive_group()
    mode.add_argument("--check", type=Path, metavar="FILE", help="fail if FILE's copy is stale")
    mode.add_argument("--write", type=Path, metavar="FILE", help="update FILE's copy in place")
    table.set_defaults(func=_table)

    drafter = sub.add_parser("check-drafter", help="check a drafter's config.json vs its target")
    drafter.add_argument(
        "--target", required=True, help="target model: a directory, or a hub id in --hub-cache"
    )
    drafter.add_argument(
        "--drafter", required=True, help="drafter: a directory, or a hub id in --hub-cache"
    )
    drafter.add_argument(
        "--hub-cache", type=Path,
        help="the Hugging Face hub cache a hub id is read from (default: HF_HUB_CACHE,"
        " HF_HOME/hub or ~/.cache/huggingface/hub; a node's is <cache_dir>/hub)",
    )  # fmt: skip
    drafter.add_argument("--revision", default="main", help="the drafter's hub revision")
    drafter.add_argument("--target-revision", default="main", help="the target's hub revision")
    drafter.add_argument(
        "--method", default="dflash", choices=DRAFTER_METHODS, help="the profile's method"
    )
    drafter.add_argument("--id", default="", help="the drafter's hub id (known-drafter table)")
    drafter.add_argument("--config-sha256", default="", help="pinned sha256 of its config.json")
    drafter.add_argument("--window", type=int, help="expected draft window, e.g. 2048")
    drafter.add_argument("--num-draft-tokens", type=int, help="the profile's block size")
    drafter.add_argument("--json", action="store_true", help="print findings as JSON")
    drafter.set_defaults(func=_check_drafter)


def _load_profile(path: Path) -> SpeculativeProfile:
    data: Any = load_yaml_file(input_file(path, "--profile"), "--profile")
    if isinstance(data, dict) and set(data) == {"speculative"}:
        data = data["speculative"]
    return SpeculativeProfile.from_mapping(data)


def _render(args: argparse.Namespace) -> int:
    flag_set = None
    if args.flags is not None:
        try:
            flag_set = json.loads(input_file(args.flags, "--flags").read_text("utf-8"))
        except OSError as exc:
            raise ValidationError("--flags", f"cannot read {args.flags}: {exc.strerror}") from None
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise ValidationError(
                "--flags", f"{args.flags} is not a JSON flag set: {syntax_problem(exc)}"
            ) from None
    engine = Engine.parse(args.engine, args.version, args.capability, flag_set)
    profile = _load_profile(args.profile)
    argv, env = launch(profile, engine, target=_target(args.target_model))
    if args.format == "json":
        print(json.dumps({"argv": argv, "env": env}))
    else:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        print((prefix + " " if prefix else "") + shlex.join(argv))
    return 0


def _target(model: str | None) -> TargetModel | None:
    """The served model: its config.json's architectures when it is a directory."""
    if model is None:
        return None
    config = Path(model) / "config.json"
    if not config.is_file():
        return TargetModel(model)
    try:
        data = json.loads(config.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ValidationError("--target-model", f"cannot read {config}: {exc}") from None
    archs = data.get("architectures") if isinstance(data, dict) else None
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ValidationError(
            "--target-model", f"{config} has no architectures list (got {archs!r})"
        )
    return TargetModel(model, tuple(archs))


def _table(args: argparse.Namespace) -> int:
    name, path = ("--check", args.check) if args.check is not None else ("--write", args.write)
    if path is not None:
        input_file(path, name)
    try:
        return _table_file(args)
    except UnicodeDecodeError:
        raise ValidationError(name, f"{path} is not UTF-8 text") from None
    except ValidationError:
        raise
    except SpecopsError as exc:  # no markers: not a file that holds the table
        raise ValidationError(name, str(exc)) from None


def _table_file(args: argparse.Namespace) -> int:
    if args.check is not None:
        if check_file(args.check):
            return 0
        print(
            f"specops: {args.check}: the profile table is stale; run"
            f" `specops profile table --write {args.check}`",
            file=sys.stderr,
        )
        return 1
    if args.write is not None:
        changed = write_file(args.write)
        print(f"{args.write}: {'updated' if changed else 'already current'}")
        return 0
    sys.stdout.write(render_table())
    return 0


def _model_dir(value: str, revision: str, cache: Path | None, name: str) -> str:
    """A model directory, or the snapshot of a hub id in the hub cache (exit 2 naming the
    file to fetch when it is not there)."""
    if not HUB_ID.match(value) or Path(value).is_dir():
        return str(input_dir(Path(value), name))
    hub = str(cache) if cache is not None else default_hub_cache()
    found, why = resolve(value, revision, hub)
    if found is None:
        raise ValidationError(name, f"{why}: {fetch_hint(value, revision, hub)}")
    return found


def _check_drafter(args: argparse.Namespace) -> int:
    target = _model_dir(args.target, args.target_revision, args.hub_cache, "--target")
    drafter = _model_dir(args.drafter, args.revision, args.hub_cache, "--drafter")
    report = check(
        args.method, target, drafter,
        drafter_id=args.id or (args.drafter if HUB_ID.match(args.drafter) else ""),
        window=args.window, num_draft_tokens=args.num_draft_tokens,
        config_sha256=args.config_sha256,
    )  # fmt: skip
    findings = report.findings
    if args.json:
        print(json.dumps([f.as_dict() for f in findings], indent=1))
    else:
        for finding in findings:
            print(finding.message)
        for warning in report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if not findings:
            known = f" (known drafter {report.known})" if report.known else ""
            print(f"{args.drafter}/config.json fits {args.target}/config.json{known}")
    return 1 if findings else 0
