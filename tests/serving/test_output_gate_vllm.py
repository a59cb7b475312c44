"""The lossless-output gate against the real lab vLLM CPU servers (session fixtures).

- The threshold, measured: the gate prompts decoded greedily by the plain server (the
  reference), again by the plain server while other requests run (another batch shape),
  and by the ngram and draft_model servers (lossless speculation); every rate is printed
  and kept (``measurement``), and each must clear the gate's default threshold.
- A server default that changes greedy output (``repetition_penalty``, what
  ``--override-generation-config`` sets) fails the match, and a looping one (a penalty
  below 1 rewards repeats) fails the degeneration check with no reference at all.
- The controller-side users (the sweep's candidate gate, the rollout's reference) on
  the same servers.

The service_unit step with the gate (a failing server put back to the previous unit) runs
against real systemd in ``molecule/inference``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from ansible_collections.specops.infra.plugins.module_utils import output_gate as og
from plugins.measurements import Record

from specops.tune.output_gate import OutputCheck, record, reference_beside, verdict

DEFAULT = og.GateConfig()
# The lab's tiny model has random weights: its greedy output is a one-token loop on every
# gate prompt (measured below), so the lab runs the gate with the loop detector off for
# it, as inventory/lab does; the match with the reference is what these servers prove.
LAB = og.GateConfig(detect_loops=False)


def _decode_with(base_url: str, extra: dict[str, Any]) -> list[og.Decoded]:
    """The gate's requests with a sampling default the server would otherwise apply."""
    out = []
    for prompt in DEFAULT.prompts:
        body = {"model": "tiny-qwen", "prompt": prompt, "max_tokens": DEFAULT.max_tokens,
                "temperature": 0, "seed": 0, "return_token_ids": True, **extra}  # fmt: skip
        choice = httpx.post(f"{base_url}/v1/completions", json=body, timeout=120).json()["choices"][
            0
        ]
        out.append(og.Decoded(prompt, choice["text"], choice.get("token_ids")))
    return out


def _reference(outputs: list[og.Decoded]) -> og.Reference:
    return og.Reference("tiny-qwen", "tiny-qwen", og.prompts_digest(DEFAULT.prompts),
                        DEFAULT.max_tokens, "plain server", outputs)  # fmt: skip


def test_threshold_measured_on_real_vllm(
    vllm_plain_server: Any, vllm_ngram_server: Any, vllm_draft_server: Any,
    measurement: Record,
) -> None:  # fmt: skip
    plain = og.decode(vllm_plain_server.base_url, "tiny-qwen", DEFAULT)
    assert all(o.token_ids is not None for o in plain), "vLLM returns token ids"
    # The gate's own loaded-batch decode: the prompts inside a batch of 4 other requests.
    loaded = og.decode_under_load(vllm_plain_server.base_url, "tiny-qwen", DEFAULT, load=4)
    assert loaded.started == 4, "every other request streamed before the prompts went"
    # ... and the batch stayed loaded until the last prompt returned (the others stream
    # requests back to back until then, however fast the server or slow this process).
    assert loaded.in_flight == 4, "every other stream still open when the prompts returned"
    reference = _reference(plain)
    runs = {
        "plain again": og.decode(vllm_plain_server.base_url, "tiny-qwen", DEFAULT),
        "plain under load": loaded.outputs,
        "ngram k=3": og.decode(vllm_ngram_server.base_url, "tiny-qwen", DEFAULT),
        "draft_model k=3": og.decode(vllm_draft_server.base_url, "tiny-qwen", DEFAULT),
        "repetition_penalty 1.3": _decode_with(
            vllm_plain_server.base_url, {"repetition_penalty": 1.3}
        ),
    }
    verdicts = {name: og.evaluate(out, reference, DEFAULT) for name, out in runs.items()}
    loops = {i: og.degeneration(o.units(True), DEFAULT) for i, o in enumerate(plain)}
    lines = [f"output gate on the lab vLLM CPU (eager fp32, {DEFAULT.max_tokens} tokens/prompt):"]
    lines += [
        f"  {name:<24} match {v.match_rate:.3f} per prompt {v.per_prompt}"
        f" -> {'pass' if v.ok else 'FAIL ' + str(v.check)}"
        for name, v in verdicts.items()
    ]
    lines.append(f"  reference loops (detector, per prompt): {loops}")
    lines.append(
        f"  under load: {loaded.started} others streaming, {loaded.in_flight} still at the end"
    )
    measurement(
        "output-gate-threshold",
        lines,
        {name: {"match": v.match_rate, "per_prompt": v.per_prompt, "check": v.check}
         for name, v in verdicts.items()},
    )  # fmt: skip
    for name in ("plain again", "plain under load", "ngram k=3", "draft_model k=3"):
        assert verdicts[name].ok, (name, verdicts[name].message)
    assert not verdicts["repetition_penalty 1.3"].ok
    assert verdicts["repetition_penalty 1.3"].check == "lossless"
    # The random-weight model loops by construction: the default detector refuses it
    # with no reference (what a degenerate engine gets), the lab's setting does not.
    assert all(loops.values()), loops
    assert og.evaluate(plain, None, DEFAULT).check == "degeneration"
    assert og.evaluate(plain, None, LAB).ok
    assert og.evaluate(runs["ngram k=3"], reference, LAB).ok
    assert og.evaluate(runs["repetition_penalty 1.3"], reference, LAB).check == "lossless"


def test_a_looping_server_is_caught_without_a_reference(vllm_plain_server: Any) -> None:
    looping = _decode_with(vllm_plain_server.base_url, {"repetition_penalty": 0.05})
    result = og.evaluate(looping, None, DEFAULT)
    assert (result.ok, result.check) == (False, "degeneration"), result.message
    assert "repeated" in result.message


def test_node_gate_records_then_judges(vllm_plain_server: Any, tmp_path: Path) -> None:
    path = tmp_path / "gate" / "ref.json"
    url = vllm_plain_server.base_url
    model = str(vllm_plain_server.model)
    loaded = og.GateConfig(detect_loops=False, load=4)
    speculative = og.NodeGate(url, "tiny-qwen", model, str(path), loaded, record=False)
    # no reference yet: the running server's output becomes it (before a change)
    speculative.before_change()
    assert json.loads(path.read_text())["source"] == "the server that ran before the change"
    judged = speculative.after_ready()
    assert judged.ok, judged.message
    # ... and inside a loaded batch too (inventory: inference_service_output_gate_load)
    assert judged.under_load is not None
    assert judged.under_load["ok"], judged.under_load
    assert judged.under_load["started"] == 4
    assert "inside a batch of 4 other requests" in judged.message
    none = og.NodeGate(url, "tiny-qwen", model, str(path), LAB, record=True)
    verdict_none = none.after_ready()
    assert verdict_none.ok
    assert none.recorded == ""  # a fitting reference is kept, not replaced
    stale = og.NodeGate(url, "tiny-qwen", "/srv/another-model", str(path), LAB, record=True)
    assert stale.after_ready().ok
    assert stale.recorded == "method none (no speculation)"  # another model: recorded anew


def test_controller_gates_on_the_same_servers(
    vllm_plain_server: Any, vllm_ngram_server: Any, tmp_path: Path
) -> None:
    baseline = tmp_path / "baselines" / "node1.json"
    ref_path = reference_beside(baseline)
    assert ref_path.name == "node1.output-gate.json"
    # a looping server is no reference (detector on); the lab's setting keeps it
    assert record(vllm_plain_server.base_url, ref_path, DEFAULT, "the node before") is None
    assert not ref_path.exists()
    assert record(vllm_plain_server.base_url, ref_path, LAB, "the node before") is not None
    assert verdict(vllm_ngram_server.base_url, ref_path, LAB).ok
    check = OutputCheck(tmp_path / "sweep" / "output-reference.json", LAB)
    assert "recorded" in check.prepare(vllm_plain_server.base_url)
    assert check.reject(vllm_ngram_server.base_url) is None
    # a reference of other outputs: the candidate is rejected with the reason
    data = json.loads(check.path.read_text())
    for out in data["outputs"]:
        out["token_ids"] = [1, 2, 3, *out["token_ids"][3:]]
    check.path.write_text(json.dumps(data))
    why = check.reject(vllm_ngram_server.base_url)
    assert why is not None
    assert why.startswith("output gate (lossless): greedy output differs from the reference")
