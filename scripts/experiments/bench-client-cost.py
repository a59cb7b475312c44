#!/usr/bin/env python3
"""P2: client cost. Tokens parsed per client CPU-second, ours vs `vllm bench serve`.

Both clients stream from one synthetic SSE server on 127.0.0.1
(``specops.bench.synthetic``, its own process) at concurrency 100. Each client runs as
a child process and its CPU time (user + system, from ``wait4``) is read when it exits.
Start-up (imports, tokenizer loading) is not part of streaming cost, so every client
runs twice, with a small and a large number of requests, and the cost is the
difference: tokens/CPU-s = (tokens_large - tokens_small) / (cpu_large - cpu_small).

Prints one line per client and the ratio ours/theirs (target >= 1.5). Needs the lab
vLLM venv (`scripts/setup.sh vllm`) for `vllm bench serve` and the tiny model's
tokenizer (vllm bench serve tokenizes its random prompts).

``--stacks`` first measures, in this process, the streaming part alone for each client
stack considered (the same ``send_request`` over each transport and JSON parser, CPU of
this process per token parsed), which is how the benchmark's stack was chosen.

    .venv/bin/python scripts/experiments/bench-client-cost.py [--tokens-per-chunk 1] \
        [--output-len 256] [--stacks]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CACHE = Path(os.environ.get("SPECOPS_CACHE", "/var/cache/specops"))
REPO = Path(__file__).resolve().parents[2]


def _default_tokenizer() -> str | None:
    models = sorted((CACHE / "vllm-models").glob("tiny-qwen-*"))
    return str(models[-1]) if models else None


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Run a child; return its CPU seconds (user + sys) and its stdout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        if proc.returncode != 0:
            sys.exit(f"{argv[0]} failed ({proc.returncode}):\n{err.read().decode()[-3000:]}")
    return usage.ru_utime + usage.ru_stime, stdout


def ours(url: str, n: int, args: argparse.Namespace, workdir: Path) -> tuple[float, int]:
    env = dict(os.environ)
    argv = [
        sys.executable, "-m", "specops.cli", "bench", "run", "--base-url", url,
        "--concurrency", str(args.concurrency), "--context-lengths", str(args.input_len),
        "--output-len", str(args.output_len), "--requests-per-cell", str(n),
        "--waves-per-cell", "0", "--warmup-per-cell", "1", "--out", str(workdir), "--json",
        "--no-report",
    ]  # fmt: skip
    cpu, stdout = _run(argv, env)
    info = json.loads(stdout.strip().splitlines()[-1])
    data = json.loads(Path(info["results"]).read_text())
    tokens = sum(c["stats"]["total_output_tokens"] for c in data["cells"])
    failed = sum(c["stats"]["failed"] for c in data["cells"])
    if failed:
        sys.exit(f"ours: {failed} failed requests")
    return cpu, tokens


def theirs(url: str, n: int, args: argparse.Namespace, workdir: Path) -> tuple[float, int]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    env.pop("PYTHONPATH", None)
    name = f"vllm-{n}.json"
    argv = [
        args.vllm_bin, "bench", "serve", "--backend", "openai", "--base-url", url,
        "--endpoint", "/v1/completions", "--model", "synthetic",
        "--tokenizer", args.tokenizer, "--dataset-name", "random",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--num-prompts", str(n), "--max-concurrency", str(args.concurrency),
        "--request-rate", "inf", "--disable-tqdm", "--save-result",
        "--result-dir", str(workdir), "--result-filename", name,
    ]  # fmt: skip
    cpu, _ = _run(argv, env)
    data = json.loads((workdir / name).read_text())
    if data.get("failed", 0):
        sys.exit(f"vllm bench serve: {data['failed']} failed requests")
    return cpu, int(data["total_output_tokens"])


def stacks(url: str, args: argparse.Namespace) -> None:
    """The streaming part alone, in this process, per client stack (CPU per token)."""
    import asyncio  # noqa: PLC0415
    import json as std_json  # noqa: PLC0415
    import resource  # noqa: PLC0415
    import types  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    from specops.bench import client as bench_client  # noqa: PLC0415
    from specops.bench.plan import Plan  # noqa: PLC0415

    std = types.SimpleNamespace(
        loads=std_json.loads, dumps=lambda o: std_json.dumps(o).encode(),
        JSONDecodeError=ValueError,
    )  # fmt: skip
    real_orjson = bench_client.orjson

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    async def run(make: object, n: int) -> tuple[int, float]:
        plan = Plan(base_url=url, output_len=args.output_len)
        sem = asyncio.Semaphore(args.concurrency)
        async with make(plan) as client:  # type: ignore[operator]

            async def one(i: int) -> bench_client.RequestRecord:
                async with sem:
                    rec = bench_client.RequestRecord(index=i, context_tokens=args.input_len)
                    return await bench_client.send_request(
                        client, plan=plan, model="synthetic", prompt="x" * args.input_len,
                        record=rec, clock_origin=0.0,
                    )  # fmt: skip

            await asyncio.gather(*(one(i) for i in range(args.concurrency)))  # warm
            began = cpu()
            recs = await asyncio.gather(*(one(i) for i in range(n)))
            used = cpu() - began
        if any(r.error for r in recs):
            sys.exit(f"stack failed: {next(r.error for r in recs if r.error)}")
        return sum(r.output_tokens or 0 for r in recs), used

    def httpcore(plan: object) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=args.concurrency + 4)
        return httpx.AsyncClient(base_url=url, limits=limits, timeout=300)

    def lean(plan: object) -> httpx.AsyncClient:
        return bench_client.make_client(plan, args.concurrency)  # type: ignore[arg-type]

    read_by_read = bench_client._fast_block

    def event_by_event(*_: object) -> bool:
        return False

    print(f"client stacks, streaming only (this process), C={args.concurrency}, "
          f"{args.output_len} tokens, {args.tokens_per_chunk} token(s)/chunk:")  # fmt: skip
    for label, make, parser, fast in (
        ("httpx's transport (httpcore + h11), json, by event", httpcore, std, event_by_event),
        ("httpx's transport, orjson, by event", httpcore, real_orjson, event_by_event),
        ("httpx + lean transport, json, by event", lean, std, event_by_event),
        ("httpx + lean transport, orjson, by event", lean, real_orjson, event_by_event),
        ("httpx + lean transport, orjson, by read (chosen)", lean, real_orjson, read_by_read),
    ):
        bench_client.orjson = parser  # type: ignore[assignment]
        bench_client._fast_block = fast  # type: ignore[assignment]
        tokens, used = asyncio.run(run(make, args.stack_requests))
        print(
            f"  {label:50} {tokens / used:>10,.0f} tok/CPU-s ({used / tokens * 1e6:.1f} us/token)"
        )
    bench_client.orjson = real_orjson
    bench_client._fast_block = read_by_read


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from specops_lab.vllm_install import lab_paths  # noqa: PLC0415 - the lab's venv

    parser.add_argument("--vllm-bin", default=str(lab_paths(CACHE).vllm_bin))
    parser.add_argument("--tokenizer", default=_default_tokenizer())
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--small", type=int, default=100, help="requests in the small run")
    parser.add_argument("--large", type=int, default=1500, help="requests in the large run")
    parser.add_argument(
        "--repeats", type=int, default=3, help="median over this many runs (0: --stacks only)"
    )
    parser.add_argument("--stacks", action="store_true", help="also compare client stacks")
    parser.add_argument("--stack-requests", type=int, default=600)
    args = parser.parse_args()
    if not Path(args.vllm_bin).exists():
        sys.exit(f"no vllm at {args.vllm_bin} (scripts/setup.sh vllm)")
    if not args.tokenizer:
        sys.exit(f"no tiny model under {CACHE / 'vllm-models'}; give --tokenizer DIR")

    server = subprocess.Popen(
        [sys.executable, "-m", "specops.bench.synthetic", "--port", "0",
         "--tokens-per-chunk", str(args.tokens_per_chunk), "--max-model-len", "100000"],
        stdout=subprocess.PIPE, env=dict(os.environ),
        start_new_session=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline().decode().split()
        url = f"http://127.0.0.1:{line[1]}"
        if args.stacks:
            stacks(url, args)
            if args.repeats == 0:
                return 0
        rates: dict[str, list[float]] = {"specops": [], "vllm bench serve": []}
        with tempfile.TemporaryDirectory(prefix="specops-p2-") as tmp:
            work = Path(tmp)
            for rep in range(args.repeats):  # alternate clients: drift hits both alike
                for label, client in (("specops", ours), ("vllm bench serve", theirs)):
                    cpu_s, tok_s = client(url, args.small, args, work)
                    started = time.monotonic()
                    cpu_l, tok_l = client(url, args.large, args, work)
                    wall = time.monotonic() - started
                    rate = (tok_l - tok_s) / (cpu_l - cpu_s)
                    rates[label].append(rate)
                    print(
                        f"[{rep + 1}/{args.repeats}] {label:18} small {args.small} req: "
                        f"{tok_s} tok {cpu_s:.2f} CPU-s | large {args.large} req: {tok_l} tok "
                        f"{cpu_l:.2f} CPU-s ({wall:.1f} s wall) | {rate:,.0f} tok/CPU-s",
                        flush=True,
                    )
        ours_rate = statistics.median(rates["specops"])
        theirs_rate = statistics.median(rates["vllm bench serve"])
        print(f"specops           median {ours_rate:,.0f} tokens per client CPU-second")
        print(f"vllm bench serve  median {theirs_rate:,.0f} tokens per client CPU-second")
        print(
            f"P2 client cost at concurrency {args.concurrency}, {args.output_len} output "
            f"tokens, {args.tokens_per_chunk} token(s)/chunk: ours/theirs = "
            f"{ours_rate / theirs_rate:.2f} (target >= 1.5)"
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
