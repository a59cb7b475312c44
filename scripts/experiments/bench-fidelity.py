#!/usr/bin/env python3
"""P1: fidelity. `specops bench run` (ours, A) and `vllm bench serve` (theirs, B) on one
real vLLM server, with the server's own /metrics as referee.

Both clients send the same prompts (the plan's deterministic, exactly sized prompts,
written as a ShareGPT-layout file for `vllm bench serve --dataset-name sharegpt
--disable-shuffle`, whose filter caps prompts at 1024 tokens), the same number of
requests (at least 4 x C), the same output length, concurrency and greedy sampling.

The protocol (the arithmetic lives in `specops.bench.fidelity`):
- warm-up: before any measured run, each client runs once at every concurrency with the
  same prompts (not counted), so the server has compiled/captured every batch size and
  seen every prompt before either client is measured; the clients' own per-run warm-ups
  are off (`--warmup-per-cell 0`, `--num-warmups 0 --ready-check-timeout-sec 0`), so the
  server's counters over a run hold exactly that run's requests;
- ABBA: per concurrency, `--repeats` pairs (default 3) in the order A B, B A, A B, ...;
- referee: for every run the server's own mean TTFT, mean TPOT, generated tokens (per
  second of the client's run) and acceptance, from /metrics deltas over that run;
- verdict per metric and C: ours/theirs over the pairs with a 95 % Student-t interval on
  the per-pair log ratios; "met" only if the whole interval lies within +-5 %, "not met"
  if it lies wholly outside, else "undecided (noise)"; beside it the same ratio of the
  server's own figures under each client's runs and the server's run-to-run spread.

Servers: `--base-url` (repeatable, with `--label` and `--server-pgid` in the same
order) measures running servers; a server without speculation counters is measured
first. Without `--base-url` it starts lab servers (`--servers plain,ngram`): first
without speculation (deterministic output, the client comparison alone), then ngram.

The peer runs in one long-lived worker process (`--peer worker`, the default) that
imports vLLM's benchmark once (`vllm.benchmarks.serve.add_cli_args` and `.main`, what
`vllm bench serve` calls) and runs each configuration through that parser and main
with the arguments the CLI would get; `--peer subprocess` starts `vllm bench serve`
per run instead (`--vllm-bin`, or `<vllm-python> -m vllm.entrypoints.cli.main`).

API key (the server's VLLM_API_KEY): `--api-key-file PATH` (mode 0600) or
`--api-key-env NAME`; ours gets it through its plan's `api_key_env`, theirs through
`OPENAI_API_KEY` in the worker's environment (what its request functions read). It is
never put on a command line, printed or written to the JSON.

    .venv/bin/python scripts/experiments/bench-fidelity.py     # lab servers: plain, then ngram k=3
    .venv/bin/python scripts/experiments/bench-fidelity.py --base-url http://127.0.0.1:8000 \\
        --tokenizer MODEL_DIR --label plain --vllm-python python3 --api-key-file key --json p1.json
    .venv/bin/python scripts/experiments/bench-fidelity.py --concurrency 1,4 --repeats 3 \\
        --requests 4 --output-len 32
"""

from __future__ import annotations

import json
import os
import sys
import time

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _peer_worker() -> int:
    """The peer in a long-lived process (run by the vLLM interpreter, stdlib only here):
    imports vLLM's benchmark once, then per line on stdin (``{"argv": [...]}``) builds
    the parser `vllm bench serve` builds, parses the arguments and calls its main. One
    JSON line per run on the original stdout; everything vLLM prints goes to stderr."""
    import gc  # noqa: PLC0415
    import importlib.metadata  # noqa: PLC0415
    import resource  # noqa: PLC0415
    import traceback  # noqa: PLC0415

    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    began = time.perf_counter()
    from vllm.benchmarks.serve import add_cli_args, main  # type: ignore[import-not-found]  # noqa: PLC0415
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]  # noqa: PLC0415

    # What `vllm`'s CLI sets up before `bench serve` (cli_env_setup; its module moved
    # between 0.20 and 0.32). The CLI's optional Rust bench (VLLM_USE_RUST_BENCH, 0.32)
    # is off by default, as here: this is the Python benchmark the CLI runs.
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    from vllm import platforms  # type: ignore[import-not-found]  # noqa: PLC0415

    if platforms.current_platform.is_unspecified():  # as `vllm bench` does
        from vllm.platforms.cpu import CpuPlatform  # type: ignore[import-not-found]  # noqa: PLC0415

        platforms.current_platform = CpuPlatform()
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        import vllm  # noqa: PLC0415

        version = str(getattr(vllm, "__version__", "unknown"))
    hello = {
        "ready": True,
        "vllm_version": version,
        "entry_point": "vllm.benchmarks.serve.add_cli_args + main",
        "import_s": round(time.perf_counter() - began, 3),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "pid": os.getpid(),
    }
    proto.write(json.dumps(hello) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("stop"):
            break
        parser = FlexibleArgumentParser(description="vllm bench serve (in a worker)")
        add_cli_args(parser)
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        wall0 = time.perf_counter()
        try:
            main(parser.parse_args(request["argv"]))
            usage1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu = usage1.ru_utime + usage1.ru_stime - usage0.ru_utime - usage0.ru_stime
            reply: dict[str, object] = {"ok": True, "cpu_s": cpu}
            reply["wall_s"] = time.perf_counter() - wall0
        except (Exception, SystemExit):  # argparse exits on a bad argument
            reply = {"ok": False, "error": traceback.format_exc()[-3000:]}
        finally:
            sys.stdout.flush()
            gc.unfreeze()  # main freezes the heap: leave the next run a fresh one's
            gc.collect()
        proto.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--peer-worker"]:
    sys.exit(_peer_worker())

import argparse  # noqa: E402
import asyncio  # noqa: E402
import platform  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import asdict  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import IO, Any, ClassVar  # noqa: E402

REPO = Path(REPO_DIR)

import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from specops.bench.fidelity import (  # noqa: E402
    METHOD,
    RatioInterval,
    Slot,
    acceptance_verdict,
    overall,
    paired_ratio_interval,
    schedule,
    spread,
    verdict,
)
from specops.bench.plan import plan_from_mapping, read_api_key  # noqa: E402
from specops.bench.prompts import PromptBuilder, ServerTokenizer, load_corpus  # noqa: E402
from specops.errors import ValidationError  # noqa: E402

CACHE = Path(os.environ.get("SPECOPS_CACHE", "/var/cache/specops"))


def _lab_python() -> Path:
    """The lab's vLLM CPU venv's interpreter (its path names the lab's lock)."""
    from specops_lab.vllm_install import lab_paths  # noqa: PLC0415 - the lab, where present

    return lab_paths(CACHE).python


_TICK = os.sysconf("SC_CLK_TCK")
_OURS_KEY_ENV = "SPECOPS_P1_API_KEY"  # ours reads the key from here (its plan's api_key_env)
Row = dict[str, Any]

# (compared metric, the referee's figure for it, label of the referee's figure)
COMPARED = (
    ("ttft_p50_ms", "server_ttft_mean_ms", "server TTFT mean ms"),
    ("tpot_p50_ms", "server_tpot_mean_ms", "server TPOT mean ms"),
    ("output_tok_s", "server_window_tok_s", "server tok/s (own clock)"),
)


async def _prompts(
    url: str, model: str, keys: list[str], tokens: int, headers: dict[str, str]
) -> list[str]:
    plan = plan_from_mapping({"base_url": url})
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as client:
        builder = PromptBuilder(
            ServerTokenizer(client, model), "completions", load_corpus(plan.prompt_set), plan.seed
        )
        return [(await builder.build(k, tokens)).text for k in keys]


class Server:
    """What the server says about itself: /metrics counters and its processes' CPU."""

    WANTED: ClassVar[dict[str, str]] = {
        "vllm:time_to_first_token_seconds": "ttft",
        "vllm:request_time_per_output_token_seconds": "tpot",
        "vllm:generation_tokens": "generated",
        "vllm:spec_decode_num_drafts": "drafts",
        "vllm:spec_decode_num_accepted_tokens": "accepted",
    }

    def __init__(self, url: str, pgid: int | None, headers: dict[str, str]) -> None:
        self.url = url
        self.pgid = pgid
        self.headers = headers

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
        return parse_metrics(httpx.get(f"{self.url}/metrics", timeout=10).text)

    def snapshot(self) -> tuple[dict[str, float], float | None]:
        return self.metrics(), self.cpu_s()

    def identity(self, model: str | None) -> Row:
        """Model, engine version, speculation (counters present) and process group."""
        models = httpx.get(f"{self.url}/v1/models", headers=self.headers, timeout=10)
        if models.status_code != 200:
            hint = " (give its API key: --api-key-file or --api-key-env)"
            sys.exit(f"{self.url}/v1/models answered HTTP {models.status_code}"
                     f"{hint if models.status_code == 401 else ''}")  # fmt: skip
        entries = models.json().get("data") or []
        if not entries:
            sys.exit(f"{self.url}/v1/models lists no model")
        chosen = next((e for e in entries if e.get("id") == model), None) if model else entries[0]
        if chosen is None:
            sys.exit(f"--model {model!r} is not served at {self.url}")
        try:
            version = httpx.get(f"{self.url}/version", timeout=10).json().get("version")
        except (httpx.HTTPError, ValueError):
            version = None
        return {
            "base_url": self.url,
            "model": chosen["id"],
            "model_root": chosen.get("root"),
            "max_model_len": chosen.get("max_model_len"),
            "engine_version": version,
            "speculative": "drafts" in self.metrics(),
            "server_pgid": self.pgid,
            "api_key_enforced": self._refuses_without_key() if self.headers else None,
        }

    def _refuses_without_key(self) -> bool:
        """Whether the server answers 401 to /v1/models without the key (it checks it)."""
        return httpx.get(f"{self.url}/v1/models", timeout=10).status_code == 401


def parse_metrics(text: str) -> dict[str, float]:
    """The referee's counters from a /metrics page, summed over label sets: ``ttft_sum``,
    ``ttft_count``, ``tpot_sum``, ``tpot_count``, ``generated`` and, with speculation,
    ``drafts`` and ``accepted``."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        key = Server.WANTED.get(family.name.removesuffix("_total"))
        if key is None:
            continue
        for sample in family.samples:
            if sample.name.endswith("_sum"):
                out[f"{key}_sum"] = out.get(f"{key}_sum", 0.0) + sample.value
            elif sample.name.endswith("_count"):
                out[f"{key}_count"] = out.get(f"{key}_count", 0.0) + sample.value
            elif sample.name.endswith("_total"):
                out[key] = out.get(key, 0.0) + sample.value
    return out


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
        """Cores each side used while the server's generated-token counter grew, and the
        server's generation rate on its own clock (not the client's): the tokens it
        generated between the first and the last sample that saw the counter grown, over
        the time between those samples (whole sampling intervals only, so the partial
        ones at the edges do not blur it; None with fewer than two such samples)."""
        grew = [i for i in range(1, len(self.samples))
                if self.samples[i][3] > self.samples[i - 1][3]]  # fmt: skip
        if not grew:
            return {"client_cores": None, "server_cores": None, "server_window_s": None,
                    "server_window_tok_s": None}  # fmt: skip
        first, last = self.samples[grew[0] - 1], self.samples[grew[-1]]
        span = last[0] - first[0]

        def cores(i: int) -> float | None:
            a, b = first[i], last[i]
            return (
                (b - a) / span if isinstance(a, float) and isinstance(b, float) and span else None
            )

        inner0, inner1 = self.samples[grew[0]], last
        inner = inner1[0] - inner0[0]
        return {
            "client_cores": cores(1), "server_cores": cores(2), "server_window_s": span,
            "server_window_tok_s": (inner1[3] - inner0[3]) / inner if inner > 0 else None,
        }  # fmt: skip


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


def referee(before: dict[str, float], after: dict[str, float], seconds: float) -> Row:
    """The server's own figures over one run, from two /metrics snapshots: mean TTFT and
    TPOT (histogram sum/count deltas), generated tokens and their rate over the client's
    measured seconds, requests it finished, and its acceptance length (1 + accepted per
    draft) when it speculates."""

    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    def mean_ms(key: str) -> float | None:
        n = delta(f"{key}_count")
        return 1000 * delta(f"{key}_sum") / n if n else None

    generated = delta("generated")
    drafts = delta("drafts")
    return {
        "server_ttft_mean_ms": mean_ms("ttft"),
        "server_tpot_mean_ms": mean_ms("tpot"),
        "server_gen_tok_s": generated / seconds if seconds > 0 else None,
        "server_generated_tokens": generated,
        "server_requests": delta("ttft_count"),
        "server_acceptance_length": 1 + delta("accepted") / drafts if drafts else None,
    }


def _cpu_delta(before: float | None, after: float | None) -> float | None:
    return after - before if before is not None and after is not None else None


class PeerWorker:
    """One long-lived process of the vLLM interpreter running :func:`_peer_worker`."""

    def __init__(self, python: str, env: dict[str, str], log: IO[bytes]) -> None:
        argv = [python, str(Path(__file__).resolve()), "--peer-worker"]
        self.log = log
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, text=True
        )
        self.hello = self._read("start")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _tail(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-3000:]

    def _read(self, what: str) -> Row:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            sys.exit(f"the vLLM benchmark worker died ({what}, rc {self.proc.returncode}):\n"
                     f"{self._tail()}")  # fmt: skip
        reply: Row = json.loads(line)
        return reply

    def run(self, argv: list[str]) -> Row:
        """One `vllm bench serve` configuration; its CPU seconds and wall seconds."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"argv": argv}) + "\n")
        self.proc.stdin.flush()
        reply = self._read("run")
        if not reply.get("ok"):
            sys.exit(f"vllm bench serve (worker) failed:\n{reply.get('error')}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(json.dumps({"stop": True}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


class Session:
    """What every run of a comparison shares: arguments, scratch dir, the peer runner."""

    def __init__(self, args: argparse.Namespace, work: Path, key: str | None) -> None:
        self.args = args
        self.work = work
        self.key = key
        self.worker: PeerWorker | None = None
        self._worker_log: IO[bytes] | None = None
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")  # fmt: skip
        for name in ("PYTHONPATH", "OPENAI_API_KEY", _OURS_KEY_ENV):
            env.pop(name, None)
        if key is not None:
            env["OPENAI_API_KEY"] = key  # what vLLM's request functions send as a bearer
        self.peer_env = env
        # ours runs in this interpreter's environment: the venv's install of specops,
        # or on the device the PYTHONPATH its command line sets.
        self.ours_env = dict(os.environ)
        self.ours_env.pop("OPENAI_API_KEY", None)
        self.ours_plan: Path | None = None
        if key is not None:
            self.ours_env[_OURS_KEY_ENV] = key
            self.ours_plan = work / "ours-plan.json"  # names the variable, not the key

    def peer_info(self) -> Row:
        if self.args.peer == "worker":
            if self.worker is None:
                self._worker_log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
                self.worker = PeerWorker(self.args.vllm_python, self.peer_env, self._worker_log)
            return {"runner": "worker", **self.worker.hello}
        return {"runner": "subprocess", "argv0": self._peer_cmd()}

    def _peer_cmd(self) -> list[str]:
        if self.args.vllm_bin:
            return [self.args.vllm_bin]
        return [self.args.vllm_python, "-m", "vllm.entrypoints.cli.main"]

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
        if self._worker_log is not None:
            self._worker_log.close()

    def ours_argv(self, url: str, c: int, n: int) -> list[str]:
        """`specops bench run` for one run (the key, if any, through its plan's variable)."""
        a = self.args
        argv = [
            sys.executable, "-m", "specops.cli", "bench", "run", "--base-url", url,
            "--concurrency", str(c), "--context-lengths", str(a.context),
            "--output-len", str(a.output_len), "--requests-per-cell", str(n),
            "--waves-per-cell", "0", "--warmup-per-cell", "0", "--temperature",
            str(a.temperature), "--out", str(self.work / "ours"), "--json", "--no-report",
        ]  # fmt: skip
        if self.ours_plan is not None:
            self.ours_plan.write_text(json.dumps({"base_url": url, "api_key_env": _OURS_KEY_ENV}))
            argv += ["--plan", str(self.ours_plan)]
        return argv

    def ours(self, url: str, c: int, n: int, server: Server) -> Row:
        argv = self.ours_argv(url, c, n)
        before = server.snapshot()
        out, cpu, cores = _run(argv, self.ours_env, server)
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
            "duration_s": s["duration_s"],
            "ttft_mean_ms": s["ttft_ms"]["mean"], "tpot_mean_ms": s["tpot_ms"]["mean"],
            "concurrency_max": s.get("concurrency_max"), "client_cpu_s": cpu, **cores,
            "server_cpu_s": _cpu_delta(before[1], after[1]),
            **referee(before[0], after[0], s["duration_s"]),
        }  # fmt: skip

    def theirs_argv(self, url: str, c: int, n: int, *, dataset: Path, model: str,
                    name: str) -> list[str]:  # fmt: skip
        """`vllm bench serve`'s arguments for one run (after `bench serve`): no warm-up
        and no ready check of its own, so the server's counters hold only this run."""
        a = self.args
        return [
            "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", a.tokenizer, "--dataset-name", "sharegpt",
            "--dataset-path", str(dataset), "--disable-shuffle",
            "--sharegpt-output-len", str(a.output_len), "--num-prompts", str(n),
            "--max-concurrency", str(c), "--request-rate", "inf", "--num-warmups", "0",
            "--ready-check-timeout-sec", "0", "--temperature", str(a.temperature),
            "--seed", "0", "--disable-tqdm", "--save-result", "--result-dir", str(self.work),
            "--result-filename", name,
        ]  # fmt: skip

    def theirs(self, url: str, c: int, n: int, server: Server, *, dataset: Path,
               model: str, seq: int) -> Row:  # fmt: skip
        a = self.args
        name = f"vllm-{seq}-c{c}.json"
        argv = self.theirs_argv(url, c, n, dataset=dataset, model=model, name=name)
        before = server.snapshot()
        if a.peer == "worker":
            assert self.worker is not None
            sampler = Sampler(server, self.worker.pid)
            sampler.start()
            try:
                cpu = float(self.worker.run(argv)["cpu_s"])
            finally:
                sampler.stop.set()
                sampler.join()
            cores = sampler.while_generating()
        else:
            _, cpu, cores = _run([*self._peer_cmd(), "bench", "serve", *argv], self.peer_env,
                                 server)  # fmt: skip
        after = server.snapshot()
        data = json.loads((self.work / name).read_text())
        if data.get("failed"):
            sys.exit(f"vllm bench serve: {data['failed']} failed requests")
        return {
            "ttft_p50_ms": data["median_ttft_ms"], "tpot_p50_ms": data["median_tpot_ms"],
            "output_tok_s": data["output_throughput"],
            "acceptance_length": data.get("spec_decode_acceptance_length"),
            "output_tokens": data["total_output_tokens"], "requests": data["completed"],
            "duration_s": float(data["duration"]),
            "ttft_mean_ms": data["mean_ttft_ms"], "tpot_mean_ms": data["mean_tpot_ms"],
            "concurrency_max": None, "client_cpu_s": cpu, **cores,
            "server_cpu_s": _cpu_delta(before[1], after[1]),
            **referee(before[0], after[0], float(data["duration"])),
        }  # fmt: skip


def _median(rows: list[Row], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(statistics.median(values)) if values else None


def _ratio(x: float | None, y: float | None) -> float | None:
    return x / y if x is not None and y else None


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _interval_text(iv: RatioInterval | None) -> str:
    if iv is None:
        return "-"
    if iv.low is None or iv.high is None:
        return f"{iv.point:.3f} [no interval]"
    return f"{iv.point:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def analyse(c: int, runs: list[Row], *, target: float, confidence: float) -> dict[str, Any]:
    """The verdicts at one concurrency from its measured runs (each with ``client`` and
    ``repeat``): per compared metric the paired ratio ours/theirs with its interval and
    verdict, the same ratio of the server's own figure under each client's runs, and the
    server's run-to-run spread over all measured runs; then acceptance and agreement."""
    measured = [r for r in runs if r["phase"] == "measured" and r["concurrency"] == c]
    by = {(r["client"], r["repeat"]): r for r in measured}
    repeats = sorted({r["repeat"] for r in measured})
    missing = [k for k in ((w, i) for i in repeats for w in ("ours", "theirs")) if k not in by]
    if missing:
        raise ValueError(f"C={c}: runs missing for {missing}")
    a = [by[("ours", i)] for i in repeats]
    b = [by[("theirs", i)] for i in repeats]
    result: dict[str, Any] = {"concurrency": c, "pairs": len(repeats),
                              "requests": a[0]["requests"] if a else None}  # fmt: skip
    metrics: dict[str, Any] = {}
    for key, server_key, _ in COMPARED:
        iv = paired_ratio_interval([r[key] for r in a], [r[key] for r in b], confidence)
        server_iv = paired_ratio_interval(
            [r[server_key] for r in a], [r[server_key] for r in b], confidence
        )
        sp = spread(r[server_key] for r in measured)
        metrics[key] = {
            "ours": [r[key] for r in a], "theirs": [r[key] for r in b],
            "ours_median": _median(a, key), "theirs_median": _median(b, key),
            "ratio": asdict(iv) if iv else None, "verdict": verdict(iv, target),
            "referee": {
                "figure": server_key,
                "under_ours": [r[server_key] for r in a],
                "under_theirs": [r[server_key] for r in b],
                "ratio": asdict(server_iv) if server_iv else None,
                "spread": asdict(sp) if sp else None,
            },
        }  # fmt: skip
    result["metrics"] = metrics
    result["verdict"] = overall(m["verdict"] for m in metrics.values())
    ours_acc = [r["acceptance_length"] for r in a]
    theirs_acc = [r["acceptance_length"] for r in b]
    result["acceptance"] = {
        "ours": ours_acc, "theirs": theirs_acc,
        "server_under_ours": [r["server_acceptance_length"] for r in a],
        "server_under_theirs": [r["server_acceptance_length"] for r in b],
        "verdict": acceptance_verdict(ours_acc, theirs_acc),
        "clients_match_server": acceptance_verdict(
            [*ours_acc, *theirs_acc],
            [r["server_acceptance_length"] for r in (*a, *b)], tolerance=0.01,
        ),
    }  # fmt: skip
    agreement = {}
    for who, rows in (("ours", a), ("theirs", b)):
        ttft = _median(rows, "ttft_mean_ms")
        server_ttft = _median(rows, "server_ttft_mean_ms")
        agreement[who] = {
            "tpot_mean_vs_server": _ratio(_median(rows, "tpot_mean_ms"),
                                          _median(rows, "server_tpot_mean_ms")),
            "tok_s_vs_server": _ratio(_median(rows, "output_tok_s"),
                                      _median(rows, "server_gen_tok_s")),
            "ttft_mean_over_server_ms": ttft - server_ttft
            if ttft is not None and server_ttft is not None else None,
            "foreign_tokens": [
                int(r["server_generated_tokens"] - r["output_tokens"]) for r in rows
            ],
        }  # fmt: skip
    result["agreement"] = agreement
    return result


def print_concurrency(v: dict[str, Any], order: str) -> None:
    c, pct = v["concurrency"], f"{100 * v.get('confidence', 0.95):.0f} %"
    print(f"\n  C={c}: {v['requests']} requests per run, {v['pairs']} pairs, order {order}")
    print(f"    {'metric (median)':16} {'specops':>10} {'vllm bench':>11}  "
          f"{'ours/theirs [' + pct + ' interval]':32} {'verdict':20} per-pair ratios")  # fmt: skip
    for key, _, _ in COMPARED:
        m = v["metrics"][key]
        iv = RatioInterval(**m["ratio"]) if m["ratio"] else None
        pairs = " ".join(f"{r:.3f}" for r in (iv.ratios if iv else ()))
        print(f"    {key:16} {_f(m['ours_median']):>10} {_f(m['theirs_median']):>11}  "
              f"{_interval_text(iv):32} {m['verdict']:20} {pairs}")  # fmt: skip
    print("    referee: the server's own figures over the same runs (/metrics deltas; its"
          " tok/s over the window its token counter grew)")  # fmt: skip
    print(f"    {'':24} {'under specops':>13} {'under vllm':>11}  {'ratio [interval]':26}"
          " server's spread over all runs (cv, range)")  # fmt: skip
    for key, _, label in COMPARED:
        ref = v["metrics"][key]["referee"]
        iv = RatioInterval(**ref["ratio"]) if ref["ratio"] else None
        sp = ref["spread"] or {}
        print(f"    {label:24} {_f(_mean(ref['under_ours'])):>13} "
              f"{_f(_mean(ref['under_theirs'])):>11}  {_interval_text(iv):26} "
              f"cv {_pct(sp.get('cv'))}, range {_pct(sp.get('range_rel'))}")  # fmt: skip
    acc = v["acceptance"]
    if acc["verdict"].startswith("n/a"):
        print("    acceptance: n/a (the server does not speculate)")
    else:
        print(f"    acceptance: {acc['verdict']}; specops {_list(acc['ours'])}, vllm bench "
              f"{_list(acc['theirs'])}; server's own under specops "
              f"{_list(acc['server_under_ours'])}, under vllm bench "
              f"{_list(acc['server_under_theirs'])} (clients vs server: "
              f"{acc['clients_match_server']})")  # fmt: skip
    for who, label in (("ours", "specops"), ("theirs", "vllm bench")):
        g = v["agreement"][who]
        print(f"    {label:10} vs the server: TPOT mean x{_f(g['tpot_mean_vs_server'])}, "
              f"output tok/s x{_f(g['tok_s_vs_server'])}, TTFT mean "
              f"{_f(g['ttft_mean_over_server_ms'], 1)} ms over the server's; tokens the "
              f"server generated beyond the run's: {g['foreign_tokens']}")  # fmt: skip
    print(f"    P1 C={c}: {v['verdict']}")


def _mean(values: list[float | None]) -> float | None:
    seen = [x for x in values if x is not None]
    return statistics.fmean(seen) if seen else None


def _list(values: list[float | None]) -> str:
    return "[" + ", ".join(_f(x) for x in values) + "]"


def _order_text(slots: list[Slot], c: int) -> str:
    letters = {"ours": "A", "theirs": "B"}
    pairs: dict[int, str] = {}
    for s in slots:
        if s.phase == "measured" and s.concurrency == c and s.repeat is not None:
            pairs[s.repeat] = pairs.get(s.repeat, "") + letters[s.client]
    return " ".join(pairs[r] for r in sorted(pairs)) + " (A specops, B vllm bench)"


def compare(session: Session, label: str, server: Server, model: str) -> dict[str, Any]:
    """Warm-up, then ABBA pairs per concurrency against one server; its verdicts."""
    a = session.args
    identity = server.identity(model)
    model = identity["model"]
    slots = schedule(a.concurrency, a.repeats)
    sizes = {c: max(a.requests, 4 * c) for c in a.concurrency}
    warm_sizes = {c: max(c, a.warmup_requests or sizes[c]) for c in a.concurrency}
    print(
        f"\nP1 on {label}: {server.url} model {model}, vLLM {identity['engine_version']}, "
        f"{'speculative' if identity['speculative'] else 'no speculation'}; {a.context} input"
        f" tokens, {a.output_len} output, temperature {a.temperature}; {len(slots)} runs "
        f"({2 * len(a.concurrency)} warm-up, then {a.repeats} ABBA pairs per C)", flush=True,
    )  # fmt: skip
    datasets: dict[int, Path] = {}
    for c in a.concurrency:
        keys = [f"c{c}-ctx{a.context}-r{i}" for i in range(max(sizes[c], warm_sizes[c]))]
        texts = asyncio.run(_prompts(server.url, model, keys, a.context, server.headers))
        # ShareGPT layout: the lab venv lacks pandas, which the custom dataset needs
        datasets[c] = session.work / f"prompts-{label}-c{c}.json"
        datasets[c].write_text(json.dumps([
            {"conversations": [{"from": "human", "value": t}, {"from": "gpt", "value": "-"}]}
            for t in texts
        ]))  # fmt: skip
    runs: list[Row] = []
    began = time.monotonic()
    for slot in slots:
        c = slot.concurrency
        n = warm_sizes[c] if slot.phase == "warmup" else sizes[c]
        start = time.monotonic()
        if slot.client == "ours":
            row = session.ours(server.url, c, n, server)
        else:
            row = session.theirs(server.url, c, n, server, dataset=datasets[c], model=model,
                                 seq=len(runs))  # fmt: skip
        row.update(asdict(slot), wall_s=round(time.monotonic() - start, 3))
        runs.append(row)
        print(f"  run {slot.seq:>3} {slot.phase:8} C={c:<3} {slot.client:6} "
              f"TPOT p50 {_f(row['tpot_p50_ms'])} ms, {_f(row['output_tok_s'], 1)} tok/s "
              f"(server TPOT {_f(row['server_tpot_mean_ms'])} ms) {row['wall_s']:.1f} s",
              flush=True)  # fmt: skip
    per_c = []
    for c in a.concurrency:
        v = analyse(c, runs, target=a.target, confidence=a.confidence)
        v["confidence"] = a.confidence
        print_concurrency(v, _order_text(slots, c))
        per_c.append(v)
    result = {
        "label": label, "server": identity, "requests_per_run": sizes,
        "warmup_requests": warm_sizes, "order": [asdict(s) for s in slots], "runs": runs,
        "concurrency": per_c, "verdict": overall(v["verdict"] for v in per_c),
        "seconds": round(time.monotonic() - began, 1),
    }  # fmt: skip
    accs = sorted({v["acceptance"]["verdict"] for v in per_c})
    print(f"\nP1 on {label}: {result['verdict']} (C = {', '.join(map(str, a.concurrency))}); "
          f"acceptance {', '.join(accs)}; {result['seconds']} s")  # fmt: skip
    return result


def machine() -> Row:
    """Where the comparison ran: host, CPU, GPUs (nvidia-smi when present), Python, the
    checkout's commit."""
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def out(argv: list[str]) -> str | None:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    gpus = out(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                "--format=csv,noheader"])  # fmt: skip
    return {
        "hostname": socket.gethostname(), "platform": platform.platform(),
        "cpu": cpu, "cpu_count": os.cpu_count(),
        "gpus": gpus.splitlines() if gpus else [],
        "python": sys.version.split()[0],
        "specops_commit": out(["git", "-C", str(REPO), "rev-parse", "HEAD"]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip


def api_key(args: argparse.Namespace) -> str | None:
    """The server's API key from --api-key-file (0600) or --api-key-env; never printed."""
    if args.api_key_file and args.api_key_env:
        sys.exit("give the API key by --api-key-file or --api-key-env, not both")
    if args.api_key_file:
        try:
            return read_api_key(args.api_key_file, "--api-key-file")
        except ValidationError as exc:
            sys.exit(str(exc))
    if args.api_key_env:
        key = os.environ.get(args.api_key_env, "").strip()
        if not key:
            sys.exit(f"--api-key-env {args.api_key_env}: that variable is unset or empty")
        return key
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--base-url",
        action="append",
        default=[],
        help="a running vLLM server (repeatable; default: lab servers)",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        help="a name per --base-url, in order (default: plain/speculative)",
    )
    parser.add_argument(
        "--server-pgid",
        type=int,
        action="append",
        default=[],
        help="process group per --base-url, same order (server CPU)",
    )
    parser.add_argument(
        "--servers", default="plain,ngram", help="lab mode: which servers, in order (plain, ngram)"
    )
    parser.add_argument("--model", help="served model name (default: from /v1/models)")
    parser.add_argument("--tokenizer", help="model dir for vllm bench serve's tokenizer")
    parser.add_argument(
        "--peer",
        choices=["worker", "subprocess"],
        default="worker",
        help="vllm bench serve in one long-lived worker, or one per run",
    )
    parser.add_argument(
        "--vllm-python",
        default=str(_lab_python()),
        help="the interpreter that imports vllm (default: lab venv's)",
    )
    parser.add_argument(
        "--vllm-bin",
        help="--peer subprocess: the `vllm` CLI (default: "
        "<vllm-python> -m vllm.entrypoints.cli.main)",
    )
    parser.add_argument("--concurrency", default="1,4,16", help="comma list")
    parser.add_argument("--context", type=int, default=512, help="input tokens")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--requests", type=int, default=16, help="per run, at least (and 4 x C)")
    parser.add_argument(
        "--warmup-requests",
        type=int,
        default=0,
        help="per warm-up run (default 0: as a measured run; >= C)",
    )
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=3, help="ABBA pairs per C (>= 3)")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--target", type=float, default=0.05, help="+- band for ours/theirs")
    parser.add_argument("--num-speculative-tokens", type=int, default=3)
    parser.add_argument("--api-key-file", help="the server's API key, one line, mode 0600")
    parser.add_argument("--api-key-env", help="or the name of a variable holding it")
    parser.add_argument("--json", type=Path, help="also write every run and verdict here")
    args = parser.parse_args(argv)
    try:
        args.concurrency = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        parser.error(f"--concurrency must be a comma list of integers (got {args.concurrency!r})")
    if args.repeats < 3:
        parser.error(f"--repeats must be >= 3 (got {args.repeats}): an interval needs pairs")
    if not 0 < args.confidence < 1 or not 0 < args.target < 1:
        parser.error("--confidence and --target must lie between 0 and 1")
    if args.context > 1024 or args.context + args.output_len > 2048:
        parser.error("--context <= 1024 and context + output <= 2048 (the ShareGPT filter)")
    if args.label and len(args.label) != len(args.base_url):
        parser.error(f"{len(args.label)} --label for {len(args.base_url)} --base-url")
    if args.server_pgid and len(args.server_pgid) != len(args.base_url):
        parser.error(f"{len(args.server_pgid)} --server-pgid for {len(args.base_url)} --base-url")
    args.servers = sorted(
        (m.strip() for m in args.servers.split(",") if m.strip()), key=lambda m: m != "plain"
    )
    if not args.servers or any(m not in ("plain", "ngram") for m in args.servers):
        parser.error(f"--servers takes plain and/or ngram (got {','.join(args.servers)!r})")
    if args.base_url and not args.tokenizer:
        parser.error("--tokenizer MODEL_DIR is needed with --base-url")
    return args


def main() -> int:
    args = parse_args()
    key = api_key(args)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    python = Path(args.vllm_python)
    if args.peer == "subprocess" and args.vllm_bin and not Path(args.vllm_bin).exists():
        sys.exit(f"--vllm-bin {args.vllm_bin} does not exist")
    if os.sep in args.vllm_python and not python.exists():
        sys.exit(f"--vllm-python {python} does not exist (scripts/setup.sh vllm)")
    report: dict[str, Any] = {
        "protocol": {
            "concurrency": args.concurrency, "repeats": args.repeats, "order": "ABBA per C",
            "warmup": "each client once at every C before any measured run",
            "context": args.context, "output_len": args.output_len,
            "temperature": args.temperature, "target": args.target,
            "confidence": args.confidence, "interval": METHOD,
            "api_key": "file" if args.api_key_file else "env" if args.api_key_env else None,
        },
        "machine": machine(),
    }  # fmt: skip
    results: list[dict[str, Any]] = []
    report["servers"] = results

    def record(result: dict[str, Any]) -> None:
        """Keep a server's result; with --json, write what is known so far (a later
        failure or timeout leaves the servers already measured on disk)."""
        results.append(result)
        report["verdict"] = overall(r["verdict"] for r in results)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2) + "\n")

    with tempfile.TemporaryDirectory(prefix="specops-p1-") as tmp:
        session = Session(args, Path(tmp), key)
        try:
            report["peer"] = session.peer_info()
            print(f"peer: {json.dumps(report['peer'])}", flush=True)
            if args.base_url:
                servers = []
                for i, url in enumerate(args.base_url):
                    pgid = args.server_pgid[i] if args.server_pgid else None
                    server = Server(url.rstrip("/"), pgid, headers)
                    spec = server.identity(args.model)["speculative"]
                    label = args.label[i] if args.label else ("speculative" if spec else "plain")
                    servers.append((spec, i, label, server))
                for _, _, label, server in sorted(servers, key=lambda s: (s[0], s[1])):
                    record(compare(session, label, server, args.model))
            else:
                lab(session, args, key, record)
        finally:
            session.close()
    print(f"\nP1: {report['verdict']} ("
          + "; ".join(f"{r['label']}: {r['verdict']}" for r in results) + ")")  # fmt: skip
    return 0


def lab(
    session: Session,
    args: argparse.Namespace,
    key: str | None,
    record: Callable[[dict[str, Any]], None],
) -> None:
    """Start each lab server in turn (plain first: no speculation), measure, stop it."""
    from specops_lab.vllm import SpecConfig, VllmServer, prepare  # noqa: PLC0415

    prepare()
    if key is not None:
        os.environ["VLLM_API_KEY"] = key  # the lab server's environment is ours
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    for method in args.servers:
        spec = SpecConfig("none" if method == "plain" else method,
                          num_speculative_tokens=args.num_speculative_tokens)  # fmt: skip
        with VllmServer(spec=spec, extra_args=("--no-enable-prefix-caching",)) as lab_server:
            args.tokenizer = args.tokenizer or str(lab_server.model)
            pgid = lab_server._proc.pid if lab_server._proc is not None else None  # own session
            server = Server(lab_server.base_url, pgid, headers)
            record(compare(session, method, server, lab_server.model_name))


if __name__ == "__main__":
    sys.exit(main())
