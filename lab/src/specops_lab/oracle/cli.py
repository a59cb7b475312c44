"""``specops lab oracle``: build, check and show oracle models.

``build`` with no family builds the CI oracles (:data:`~specops_lab.oracle.lab.CI_SPECS`)
into the lab cache (a no-op when built); with ``--family``/``--shape``/``--out`` any
build, in the lab's vLLM venv (or ``--python``). ``check`` runs the self-check again,
``show`` prints a build's record in short.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specops.errors import ValidationError
from specops_lab.oracle.lab import (
    CI_SPECS,
    build_oracle,
    oracle_dir,
    oracle_record,
    pythonpath,
)
from specops_lab.oracle.spec import FAMILIES, SHAPES, OracleSpec
from specops_lab.vllm_install import lab_paths

__all__ = ["register"]


def _paths(args: argparse.Namespace) -> Any:
    return lab_paths(Path(args.cache) if args.cache else None)


def _specs(args: argparse.Namespace) -> tuple[OracleSpec, ...]:
    try:
        extra = json.loads(args.spec)
    except ValueError as exc:
        raise ValidationError(
            "--spec", f"must be a JSON object of OracleSpec fields ({exc})"
        ) from None
    if not isinstance(extra, dict):
        raise ValidationError("--spec", "must be a JSON object of OracleSpec fields")
    if not args.family:
        if args.shape or extra or args.out:
            raise ValidationError("--family", "is required with --shape, --spec or --out")
        return CI_SPECS
    if not args.shape:
        raise ValidationError("--shape", f"is required with --family; one of {', '.join(SHAPES)}")
    return (OracleSpec.from_mapping({**extra, "families": args.family, "shape": args.shape}),)


def _cmd_build(args: argparse.Namespace) -> int:
    for spec in _specs(args):
        result = build_oracle(
            _paths(args), spec, out=Path(args.out) if args.out else None, device=args.device,
            check=not args.no_check, python=Path(args.python) if args.python else None,
        )  # fmt: skip
        state = "built" if result.changed else "already built"
        print(f"{result.path}: {state} in {result.seconds:.1f} s")
    return 0


def _summary(path: Path) -> dict[str, Any]:
    record = oracle_record(path)
    return {
        "path": str(path),
        "spec": record["spec"],
        "folders": {k: v["architecture"] for k, v in record["folders"].items()},
        "calibration": {
            k: record.get("calibration", {}).get(k) for k in ("relative_scale", "per_position")
        },
        "checks": record.get("checks", {}),
        "seconds": record.get("seconds"),
    }


def _cmd_show(args: argparse.Namespace) -> int:
    path = Path(args.dir) if args.dir else oracle_dir(_paths(args))
    print(json.dumps(_summary(path), indent=2, sort_keys=True))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    import subprocess  # noqa: PLC0415

    paths = _paths(args)
    path = Path(args.dir) if args.dir else oracle_dir(paths)
    python = args.python or str(paths.python)
    proc = subprocess.run(
        [python, "-m", "specops_lab.oracle", "check", str(path), "--device", args.device],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()}, check=False,
    )  # fmt: skip
    return proc.returncode


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``oracle`` under ``specops lab``."""
    oracle = subparsers.add_parser(
        "oracle",
        help="oracle models: speculation with acceptance known by construction",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    sub = oracle.add_subparsers(dest="oracle_command", metavar="COMMAND", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--cache", help="cache root (default: $SPECOPS_CACHE or /var/cache/specops)")
        p.add_argument("--python", help="python with torch (default: the lab's vLLM venv)")
        p.add_argument("--device", default="cpu", help="torch device (default cpu)")

    p = sub.add_parser("build", help="build an oracle (no family: the CI oracles, cached)")
    common(p)
    p.add_argument("--family", action="append", choices=FAMILIES,
                   help="partner family; repeat for several on one target")  # fmt: skip
    p.add_argument("--shape", choices=sorted(SHAPES))
    p.add_argument("--out", help="a new folder (default: the lab cache)")
    p.add_argument(
        "--spec", default="{}", help="more OracleSpec fields as JSON, e.g. '{\"cycle\": 16}'"
    )
    p.add_argument("--no-check", action="store_true", help="skip the self-check")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser("check", help="run a build's self-check again")
    common(p)
    p.add_argument("dir", nargs="?", help="built folder (default: the CI oracle)")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("show", help="a build's record in short")
    common(p)
    p.add_argument("dir", nargs="?", help="built folder (default: the CI oracle)")
    p.set_defaults(func=_cmd_show)
