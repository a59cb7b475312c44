"""The operator's objective (sweep config ``objective.kind``), read from recorded results
(the H200's SGLang runs: no speculation and the draft model at 3 steps, 512 in / 128 out,
C = 1, 4, 16)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from plugins.scripts import REPO

from specops.bench.results import load_results
from specops.errors import ValidationError
from specops.tune.config import load_config
from specops.tune.objective import CorrectnessGate, Objective, measurement_from_results

RUN = REPO / "tests" / "fixtures" / "gpu-serving" / "h200-sglang-2026-12-03-run2"
PLAIN = load_results(RUN / "bench-plain" / "results.json")
DRAFT = load_results(RUN / "sweep" / "runs" / "num_steps=3" / "r1.json")
CONFIG = yaml.safe_load((RUN / "sweep-config.yml").read_text())


def _cfg(objective: dict[str, object], **plan: object) -> object:
    data = {**CONFIG, "objective": {**CONFIG["objective"], **objective}}
    data["plan"] = {**CONFIG["plan"], **plan}
    return load_config(data)


def test_the_default_is_the_mean_over_cells_and_keeps_old_ledgers() -> None:
    cfg = _cfg({})
    assert cfg.objective == Objective()
    assert "objective" not in cfg.fingerprint()  # the recorded ledger still matches
    m = measurement_from_results(DRAFT, CorrectnessGate(), cfg.objective)
    assert m.objective == pytest.approx(sum(c.stats.output_tok_s for c in DRAFT.cells) / 3)


def test_latency_is_the_per_request_speed_at_c1_by_default() -> None:
    cfg = _cfg({"kind": "latency"})
    assert (cfg.objective.concurrency, cfg.objective.context) == (1, 512)
    assert "objective" in cfg.fingerprint()
    value, _ = cfg.objective.value(DRAFT)
    c1 = DRAFT.cells[0]
    assert value == pytest.approx(1000 / c1.stats.tpot_ms.p50)
    # plain beats the draft model one request at a time too, and says by how much
    plain, _ = cfg.objective.value(PLAIN)
    assert plain is not None
    assert value is not None
    assert plain > value
    named = _cfg({"kind": "latency", "concurrency": 4})
    assert named.objective.value(DRAFT)[0] == pytest.approx(1000 / DRAFT.cells[1].stats.tpot_ms.p50)


def test_throughput_at_the_highest_c_by_default_and_a_mix_by_weights() -> None:
    cfg = _cfg({"kind": "throughput"})
    assert cfg.objective.concurrency == 16
    assert cfg.objective.value(DRAFT)[0] == pytest.approx(DRAFT.cells[2].stats.output_tok_s)
    mix = _cfg({"kind": "mix", "mix": [
        {"concurrency": 1, "context": 512, "weight": 3}, {"concurrency": 16, "context": "512"},
    ]})  # fmt: skip
    a, b = DRAFT.cells[0].stats.output_tok_s, DRAFT.cells[2].stats.output_tok_s
    assert mix.objective.value(DRAFT)[0] == pytest.approx(
        math.exp((3 * math.log(a) + math.log(b)) / 4)
    )


def test_goodput_is_the_highest_rate_of_a_cell_meeting_the_p90_limits() -> None:
    # the recorded plan sends 8 requests at C=1 and 4: no p90 there, so goodput is refused
    with pytest.raises(ValidationError, match=r"^objective.kind: goodput judges TTFT/TPOT p90"):
        _cfg({"kind": "goodput", "tpot_ms": 5})
    cfg = _cfg({"kind": "goodput", "tpot_ms": 4.9}, requests_per_cell=16)
    # read on the recorded runs: only C=16 has 16 requests; TPOT p90 4.96 > 4.9 for the draft
    c16 = DRAFT.cells[2]
    assert c16.stats.tpot_ms.p90 > 4.9
    assert cfg.objective.value(DRAFT)[0] == 0.0
    loose = _cfg({"kind": "goodput", "tpot_ms": 5.1}, requests_per_cell=16)
    assert loose.objective.value(DRAFT)[0] == pytest.approx(c16.stats.request_rate)


_IN_PLAN = r"is not in the plan's"


@pytest.mark.parametrize(
    ("objective", "message"),
    [
        ({"kind": "speed"}, r"^objective.kind: must be one of mean, latency, throughput"),
        ({"kind": "latency", "concurrency": 64}, rf"^objective.concurrency: 64 {_IN_PLAN}"),
        ({"kind": "throughput", "context": "8K"}, rf"^objective.context: 8192 {_IN_PLAN}"),
        ({"kind": "mean", "concurrency": 1}, r"^objective.concurrency: does not apply to"),
        ({"kind": "goodput"}, r"^objective.ttft_ms: goodput needs a TTFT or TPOT p90 limit"),
        ({"kind": "mix"}, r"^objective.mix: is required for kind mix"),
        ({"kind": "mix", "mix": [{"concurrency": 1}]}, r"^objective.mix\[0\].context: is "),
        (
            {"kind": "mix", "mix": [{"concurrency": 1, "context": 512, "weight": 0}]},
            r"^objective.mix\[0\].weight: must be a number > 0",
        ),
        ({"kind": "latency", "concurency": 1}, r"^objective.concurency: unknown key; valid: "),
    ],
)
def test_a_wrong_objective_names_its_key(objective: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _cfg(objective)


def test_a_run_without_the_objectives_cell_is_rejected(tmp_path: Path) -> None:
    cfg = _cfg({"kind": "latency", "concurrency": 4})
    data = DRAFT.to_dict()
    data["cells"] = [c for c in data["cells"] if c["concurrency"] != 4]
    path = tmp_path / "r.json"
    path.write_text(__import__("json").dumps(data))
    m = measurement_from_results(load_results(path), CorrectnessGate(), cfg.objective)
    assert not m.ok
    assert m.reason == "objective: cell C=4 ctx 512 not measured"
