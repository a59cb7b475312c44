"""A plan's price before it runs (``specops bench plan``), and the refusals before it
runs: a context the server cannot take, ``--save-plan`` without a plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from plugins.scripts import REPO

from specops import cli
from specops.bench.plan import plan_from_mapping
from specops.bench.price import price
from specops.bench.results import load_results
from specops.errors import ValidationError

RUN = REPO / "tests" / "fixtures" / "gpu-serving" / "h200-sglang-2026-12-03-run2"
# The seeds' matrix: C = 1..64 x 1K..120K, Qwen3.6-27B (bf16, 54 GB read per token) on
# two RTX A6000 (tensor parallel 2).
SEEDS = {
    "base_url": "http://127.0.0.1:8000", "model": "qwen3.6-27b",
    "concurrency": [1, 2, 4, 8, 16, 32, 64], "context_lengths": ["1K", "8K", "30K", "60K", "120K"],
    "output_len": 256,
    "roofline": {"gpu": "rtx-a6000", "gpu_count": 2, "tp_size": 2,
                 "bytes_per_token": 54_000_000_000},
}  # fmt: skip


def test_the_seeds_matrix_has_a_price() -> None:
    priced = price(plan_from_mapping(SEEDS), max_model_len=131072)
    assert len(priced.cells) == 35
    by_c = {c.concurrency: c for c in priced.cells if c.context_tokens == 1024}
    # max(requests_per_cell 32, 4 waves x C): C = 64 sends 256
    assert [by_c[c].requests for c in (1, 16, 32, 64)] == [32, 64, 128, 256]
    # warm-up: 2 per cell and one wave of C before the first measured cell
    assert by_c[64].warmup == 2 + 64
    assert priced.requests == 5 * (32 * 4 + 64 + 128 + 256)
    assert priced.warmup == 5 * sum(2 + c for c in (1, 2, 4, 8, 16, 32, 64))
    top = next(c for c in priced.cells if (c.concurrency, c.context_tokens) == (64, 122880))
    assert top.prompt_tokens == (256 + 66) * 122880
    assert top.output_tokens == (256 + 66) * 256
    # no last run: the roofline (2 x 768 GB/s over 54 GB: 28.4 steps/s, one token each)
    assert priced.basis.startswith("roofline: 28 decode steps/s")
    steps = 2 * 768e9 / 54e9
    c1 = by_c[1]
    assert c1.seconds == pytest.approx((32 + 2 + 1) * 256 / steps)
    assert priced.seconds == pytest.approx(sum(c.seconds or 0 for c in priced.cells))


def test_a_120k_cell_against_an_8k_server_is_refused_unless_the_plan_says_clip() -> None:
    plan = plan_from_mapping({**SEEDS, "context_lengths": ["1K", "4K", "16K", "120K"]})
    with pytest.raises(ValidationError, match=r"^context_lengths\[2\]: 16384 tokens \+ output_len"
                       r" 256 exceed the server's max_model_len 8192 \(the longest input that"
                       r" fits: 7936\)"):  # fmt: skip
        price(plan, max_model_len=8192)
    clipped = price(plan_from_mapping({**plan.to_dict(), "context_over_limit": "clip"}),
                    max_model_len=8192)  # fmt: skip
    assert sorted({c.context_tokens for c in clipped.cells}) == [1024, 4096, 7936]
    assert any("clipped to 7936" in n for n in clipped.notes)
    dropped = price(plan_from_mapping({**plan.to_dict(), "context_over_limit": "drop"}),
                    max_model_len=8192)  # fmt: skip
    assert sorted({c.context_tokens for c in dropped.cells}) == [1024, 4096]
    # a plan that names no lengths takes the defaults and leaves out those that do not fit
    default = plan_from_mapping({"base_url": "http://127.0.0.1:8000"})
    assert default.context_over_limit == "drop"
    assert sorted({c.context_tokens for c in price(default, max_model_len=8192).cells}) == [1024]
    # unknown limit: not checked, and said so
    assert "not checked" in price(plan).notes[-1]


def test_the_last_run_of_the_server_prices_the_time(tmp_path: Path, capsys) -> None:
    """The H200's plain run (512 in, 128 out, C = 1, 4, 16) prices a plan of its server."""
    last = load_results(RUN / "bench-plain" / "results.json")
    plan = plan_from_mapping({**last.plan, "concurrency": [1, 4, 16, 64]})
    priced = price(plan, max_model_len=last.server.max_model_len, history=last)
    c1 = priced.cells[0]
    rate = last.cells[0].stats.output_tok_s
    assert c1.seconds == pytest.approx((c1.requests + c1.warmup) * 128 / rate)
    assert c1.basis == f"{last.run_id} c1-ctx512"
    assert priced.cells[-1].basis == f"{last.run_id} c16-ctx512 (nearest)"
    # the CLI finds it as the newest run of that server under --out
    run_dir = tmp_path / "results" / last.run_id
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_bytes((RUN / "bench-plain" / "results.json").read_bytes())
    (run_dir / "run.json").write_text(json.dumps(last.header()))
    plan_file = tmp_path / "plan.yml"
    plan_file.write_text(yaml.safe_dump({**last.plan, "api_key_file": None}))
    argv = ["bench", "plan", "--plan", str(plan_file), "--out", str(tmp_path / "results")]
    assert cli.main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_model_len"] == 32768
    assert out["max_model_len_from"] == f"the last run, {last.run_id}"
    assert out["seconds"] == pytest.approx(sum(c["seconds"] for c in out["cells"]))
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "Context limit: max_model_len 32768 (from the last run," in text
    assert "Estimated time:" in text
    assert f"(the last run of this server, {last.run_id}" in text


def test_bench_run_refuses_a_context_the_server_cannot_take_before_any_request(
    synthetic, tmp_path: Path, capsys
) -> None:
    server = synthetic(max_model_len=8192)
    argv = ["bench", "run", "--base-url", server.url, "--concurrency", "1",
            "--context-lengths", "1K,120K", "--output-len", "8",
            "--out", str(tmp_path / "r")]  # fmt: skip
    assert cli.main(argv) == 2
    assert "context_lengths[1]: 122880 tokens + output_len 8 exceed" in capsys.readouterr().err
    assert server.requests == 0
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
    # said to clip, it measures the cell at the limit and says so on the terminal
    clip = [*argv[:-2], "--context-over-limit", "clip", "--requests-per-cell", "2",
            "--waves-per-cell", "0", "--warmup-per-cell", "0", "--no-report", "--json",
            "--out", str(tmp_path / "r")]  # fmt: skip
    assert cli.main(clip) == 0
    captured = capsys.readouterr()
    assert "note: context 122880 clipped to 8184 (max_model_len 8192" in captured.err
    done = json.loads(captured.out)
    assert [c.context_tokens for c in load_results(done["results"]).cells] == [1024, 8184]


def test_save_plan_needs_a_plan(tmp_path: Path, capsys) -> None:
    argv = ["bench", "run", "--base-url", "http://127.0.0.1:1", "--save-plan",
            str(tmp_path / "p.yml"), "--out", str(tmp_path)]  # fmt: skip
    assert cli.main(argv) == 2
    assert "--save-plan: needs --plan" in capsys.readouterr().err
    assert not (tmp_path / "p.yml").exists()
