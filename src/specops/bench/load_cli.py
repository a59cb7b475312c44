"""``specops bench load``: the command line of :mod:`specops.bench.load`.

Exit 0 when no request failed (retried ones succeeded), 1 when one failed, the
command's own exit code when the command (after ``--``) failed; 2 on bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from specops.bench.load import LoadSpec, render, run_load, summarize, write
from specops.errors import ValidationError, output_dir

__all__ = ["add_load_parser"]


def add_load_parser(sub: Any) -> None:
    load = sub.add_parser(
        "load",
        help="hold a steady background load; report every failed and retried request",
        description=(
            "Hold a steady load (a rate or a concurrency) against a server or a router "
            "for --duration seconds, or while a command runs (-- CMD ...), and "
            "report every failed and retried request with its time, each target's "
            "outages and the latency (overall and while the command ran)."
        ),
    )
    load.add_argument(
        "--base-url", action="append", required=True, metavar="URL",
        help="a target (repeat: requests go to the targets in turn)",
    )  # fmt: skip
    shape = load.add_mutually_exclusive_group(required=True)
    shape.add_argument("--rate", type=float, help="requests per second (open loop)")
    shape.add_argument("--concurrency", type=int, help="clients, each one request at a time")
    load.add_argument(
        "--duration", type=float, required=True, metavar="S",
        help="seconds of load; with --during, the most it lasts",
    )  # fmt: skip
    load.add_argument("--model", help="the served model name (default: the first listed)")
    load.add_argument("--output-len", type=int, default=32, help="max_tokens per request")
    load.add_argument(
        "--retries", type=int, default=0,
        help="retry a failed request on the next target up to N times (default 0)",
    )  # fmt: skip
    load.add_argument(
        "--max-in-flight", type=int, default=64, help="open loop: most requests at once"
    )
    load.add_argument("--request-timeout", type=float, default=300.0, metavar="S")
    load.add_argument("--api-key-file", help="bearer token file (0600)")
    load.add_argument("--temperature", type=float)
    load.add_argument(
        "--tail", type=float, default=0.0, metavar="S",
        help="with --during: seconds of load after the command ended",
    )  # fmt: skip
    load.add_argument("--out", help="directory for requests.jsonl and load.json")
    load.add_argument("--json", action="store_true", help="print the summary as JSON only")
    load.add_argument(
        "during", nargs=argparse.REMAINDER, metavar="-- CMD ...",
        help="run CMD while the load holds; the load ends with it (then --tail S more)",
    )  # fmt: skip
    load.set_defaults(func=_cmd_load)


def _cmd_load(args: argparse.Namespace) -> int:
    during = list(args.during or [])
    if during and during[0] == "--":
        during = during[1:]
    elif during:
        raise ValidationError("CMD", f"put the command after -- (got {during[0]!r})")
    out = output_dir(args.out, "--out") if args.out else None
    spec = LoadSpec(
        targets=tuple(args.base_url), duration_s=args.duration, rate=args.rate,
        concurrency=args.concurrency, model=args.model, output_len=args.output_len,
        retries=args.retries, max_in_flight=args.max_in_flight,
        request_timeout_s=args.request_timeout, api_key_file=args.api_key_file,
        temperature=args.temperature, tail_s=args.tail,
    )  # fmt: skip
    spec.check()
    # the command's output must not mix into the JSON on stdout
    to_stderr = sys.stderr.fileno() if args.json and during else None
    report = asyncio.run(run_load(spec, during or None, during_stdout=to_stderr))
    summary = summarize(report)
    if out is not None:
        write(report, summary, Path(out))
    if args.json:
        print(json.dumps(summary))
    else:
        print("\n".join(render(summary)))
        if out is not None:
            print(f"requests: {Path(out) / 'requests.jsonl'}; summary: {Path(out) / 'load.json'}")
    if report.command is not None and report.command.rc != 0:
        return report.command.rc
    return 1 if summary["failed"] else 0
