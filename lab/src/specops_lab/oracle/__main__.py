"""``python -m specops_lab.oracle build|check``: the builder where torch is.

On the accelerator machine (torch + safetensors + tokenizers; no transformers needed),
from the repository root::

    PYTHONPATH=lab/src:collections python3 -m specops_lab.oracle build \\
        --family mtp --shape mimo7b --device cuda --out /root/oracle/mimo

Here, ``specops lab oracle build`` runs the same in the lab's vLLM venv. Prints one
line per step and, last, the record's path; exit 1 when the self-check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specops_lab.oracle.spec import DTYPES, FAMILIES, RECORD_NAME, SHAPES, OracleSpec

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m specops_lab.oracle", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build a target and its partners into --out")
    build.add_argument("--family", action="append", required=True, choices=FAMILIES,
                       help="partner family (repeat for several sharing one target)")  # fmt: skip
    build.add_argument("--shape", required=True, choices=sorted(SHAPES))
    build.add_argument("--out", required=True, type=Path, help="a new (or empty) folder")
    build.add_argument("--device", default="cpu", help="torch device: cpu, cuda (default cpu)")
    build.add_argument("--spec", default="{}", help="more OracleSpec fields as JSON")
    build.add_argument("--no-check", action="store_true", help="skip the self-check")
    build.add_argument("--shard-mb", type=float, default=4000.0,
                       help="largest safetensors file, MB (default 4000)")  # fmt: skip
    check = sub.add_parser("check", help="self-check a built folder again")
    check.add_argument("out", type=Path)
    check.add_argument("--device", default="cpu")
    top.epilog = f"shapes: {', '.join(SHAPES)}; calibration dtypes: {', '.join(DTYPES)}"
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "build":
        from specops_lab.oracle.builder import build  # noqa: PLC0415 - torch

        extra = json.loads(args.spec)
        spec = OracleSpec.from_mapping({**extra, "families": args.family, "shape": args.shape})
        build(spec, args.out, device=args.device, check=not args.no_check,
              shard_bytes=int(args.shard_mb * 1e6))  # fmt: skip
        print(args.out / RECORD_NAME)
        return 0
    from specops_lab.oracle.selfcheck import CheckFailed, check_build  # noqa: PLC0415

    record = json.loads((args.out / RECORD_NAME).read_text())
    try:
        check_build(args.out, record, device=args.device)
    except CheckFailed as exc:
        print(f"self-check failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
