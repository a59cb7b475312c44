"""The lossless-output gate's decisions (no server): match rate, loop detector, verdicts.

The gate against real servers (the threshold measured on the lab's vLLM CPU, a server
flag that changes greedy output, a looping server) is in ``test_output_gate_vllm.py``
and ``molecule/inference``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.output_gate import (
    PROMPTS,
    Decoded,
    GateConfig,
    NodeGate,
    Reference,
    degeneration,
    evaluate,
    load_reference,
    match_rate,
    prompts_digest,
    save_reference,
)

from specops.errors import ValidationError
from specops.tune.output_gate import gate_config

CONFIG = GateConfig(threshold=0.9, max_run=12, max_period=4, min_span=24)


def _out(ids: list[int], prompt: str = "p", text: str | None = None) -> Decoded:
    return Decoded(prompt, text if text is not None else " ".join(map(str, ids)), ids)


def _ref(outputs: list[Decoded]) -> Reference:
    return Reference("m", "/srv/m", prompts_digest(PROMPTS), 48, "method none", outputs)


def test_match_rate_is_the_common_prefix_over_the_reference() -> None:
    assert match_rate([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert match_rate([1, 2, 3, 4], [1, 2, 9, 4]) == 0.5  # a flip ends the match
    assert match_rate([1, 2, 3, 4], [1, 2]) == 0.5
    assert match_rate([1, 2], [1, 2, 3, 4]) == 1.0
    assert match_rate([], []) == 1.0
    assert match_rate([], [1]) == 0.0


def test_single_token_loop_is_degenerate() -> None:
    lam = [7] * 12
    assert degeneration([1, 2, 3, *lam], CONFIG) == "7 repeated 12 times in a row (limit 11)"
    assert degeneration([1, 2, 3, *[7] * 11, 4], CONFIG) is None


def test_short_cycle_over_a_long_span_is_degenerate() -> None:
    cycle = [5, 6, 7] * 8  # 24 units
    why = degeneration([1, 2, *cycle], CONFIG)
    assert why is not None
    assert why.startswith("a 3-unit cycle")
    assert degeneration([1, 2, *cycle[:-1]], CONFIG) is None  # 23 units: under the span
    # a cycle longer than max_period is not looked for
    assert degeneration([1, 2, 3, 4, 5] * 10, CONFIG) is None
    # text units work the same ("lambda lambda ...": word and space alternate)
    text = Decoded("p", "x = " + "lambda " * 13)
    assert degeneration(text.units(tokens=False), CONFIG) is not None


def test_ordinary_code_is_not_degenerate() -> None:
    code = Decoded(
        "p",
        "    if n < 2:\n        return n\n    a, b = 0, 1\n    for _ in range(n - 1):\n"
        "        a, b = b, a + b\n    return b\n",
    )
    assert degeneration(code.units(tokens=False), CONFIG) is None


def test_verdicts() -> None:
    good = [_out(list(range(i, i + 40)), f"p{i}") for i in range(6)]
    ref = _ref(good)
    assert evaluate(good, ref, CONFIG).ok
    # one prompt flips at half its length: mean 1 - 0.5/6 = 0.917 >= 0.9
    flipped = [*good[:5], _out([*range(5, 25), 0, *range(26, 45)], "p5")]
    verdict = evaluate(flipped, ref, CONFIG)
    assert verdict.ok
    assert verdict.per_prompt == [1.0] * 5 + [0.5]
    assert verdict.compared_on == "token ids"
    # two prompts wrong from the start: 4/6 < 0.9
    wrong = [*good[:4], _out([99] * 3, "p4"), _out([98, 97], "p5")]
    verdict = evaluate(wrong, ref, CONFIG)
    assert (verdict.ok, verdict.check) == (False, "lossless")
    assert "token match rate 0.667 < 0.9" in verdict.message
    # a loop fails even without a reference
    looping = [*good[:5], _out([1, 2, *[3] * 20], "p5")]
    verdict = evaluate(looping, None, CONFIG)
    assert (verdict.ok, verdict.check) == (False, "degeneration")
    assert "prompt 6" in verdict.message
    assert evaluate(good, None, CONFIG).ok


def test_a_prompt_the_reference_loops_on_is_left_to_the_match() -> None:
    loop = _out([1, 2, *[3] * 20], "p0")
    ref = _ref([loop])
    assert evaluate([loop], ref, CONFIG).ok
    other = _out([1, 2, *[4] * 20], "p0")
    verdict = evaluate([other], ref, CONFIG)
    assert (verdict.ok, verdict.check) == (False, "lossless")


def test_text_units_when_the_engine_returns_no_token_ids() -> None:
    ref = _ref([Decoded("p", "return a + b\n")])
    verdict = evaluate([Decoded("p", "return a - b\n")], ref, CONFIG)
    assert verdict.compared_on == "text units"
    # 8 units: 'return', ' ', 'a', ' ', '+', ' ', 'b', newline; the 5th differs
    assert verdict.per_prompt == [0.5]


def test_reference_round_trip_and_staleness(tmp_path: Path) -> None:
    path = tmp_path / "gate" / "ref.json"
    assert load_reference(str(path)) is None
    ref = _ref([_out([1, 2, 3])])
    save_reference(str(path), ref)
    back = load_reference(str(path))
    assert back is not None
    assert back.outputs == ref.outputs
    assert back.recorded_at
    assert back.fits("/srv/m", GateConfig()) is None
    assert "recorded for model /srv/m" in str(back.fits("/srv/other", GateConfig()))
    assert "max_tokens 48, not 32" in str(back.fits("/srv/m", GateConfig(max_tokens=32)))
    assert "prompt set" in str(back.fits("/srv/m", GateConfig(prompts=("x",))))
    path.write_text("{not json")
    with pytest.raises(RuntimeError, match="not a readable reference"):
        load_reference(str(path))
    path.write_text(json.dumps({"model": "x"}))
    with pytest.raises(RuntimeError, match="not a reference"):
        load_reference(str(path))


def test_config_problems_name_the_field() -> None:
    assert GateConfig().problems() == []
    bad = GateConfig(threshold=1.5, max_tokens=2, min_span=0)
    assert bad.problems() == [
        "threshold: must be in (0, 1] (got 1.5)",
        "max_tokens: must be an integer >= 8 (got 2)",
        "min_span: must be an integer >= 4 (got 0)",
    ]


def test_node_gate_without_a_server_fails_with_decode(tmp_path: Path) -> None:
    gate = NodeGate("http://127.0.0.1:9", "m", "/srv/m", str(tmp_path / "ref.json"), record=True)
    verdict = gate.after_ready()
    assert (verdict.ok, verdict.check) == (False, "decode")
    assert not (tmp_path / "ref.json").exists()


def test_controller_settings_in_the_inventory_shape() -> None:
    assert gate_config(True) == GateConfig()
    assert gate_config(None) == GateConfig()
    assert gate_config(False) is None
    assert gate_config({"enabled": False}) is None
    lab = gate_config({"enabled": True, "threshold": 0.8, "degeneration": {"enabled": False}})
    assert lab == GateConfig(threshold=0.8, detect_loops=False)
    assert degeneration([7] * 40, lab) is None  # the detector is off, nothing else
    with pytest.raises(ValidationError, match=r"^output_gate: unknown key\(s\) \['treshold'\]"):
        gate_config({"treshold": 0.8})
    with pytest.raises(ValidationError, match=r"^output_gate\.threshold: must be in \(0, 1\]"):
        gate_config({"threshold": 2})
