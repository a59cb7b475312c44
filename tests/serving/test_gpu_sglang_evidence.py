"""What a real SGLang 0.5.11 on an H200 did, read back by the project's own code.

``tests/fixtures/gpu-serving/h200-sglang-2026-12-03/`` is what
``scripts/device/serve-gpu-device.py --engine sglang`` brought back from the accelerator
machine (docs/evidence/gpu-sglang.md): the units the ``inference_service`` role rendered for
``engine: sglang``, the run's record, SGLang's own ``/generate`` answers (``meta_info``
with the speculative fields), ``/get_server_info``, the ``sglang:`` counters of
``/metrics`` and ``sglang.bench_serving``'s results on the same servers, and the flag
list SGLang's own parser built there. The API key was scrubbed from every file (SGLang
answers it in ``/get_server_info``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils import output_gate as og
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import (
    FLAG_LISTS,
    Engine,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import to_argv
from plugins.scripts import REPO, load_script

from specops.bench.metrics import acceptance_from_sglang
from specops_lab import unit_exec

RUN = REPO / "tests" / "fixtures" / "gpu-serving" / "h200-sglang-2026-12-03"
RECORD: dict[str, Any] = json.loads((RUN / "record.json").read_text())
STEPS: dict[str, Any] = RECORD["steps"]
CONFIGS = ("plain", "ngram", "draft")
SCRUBBED = "<api-key: scrubbed>"


def _json(name: str) -> Any:
    return json.loads((RUN / name).read_text())


@pytest.mark.parametrize("name", CONFIGS)
def test_the_server_ran_the_command_line_the_role_rendered(name: str) -> None:
    unit = unit_exec.parse_unit((RUN / "units" / f"{name}.service").read_text())
    started = STEPS[f"config-{name}"]["start"]
    env = {**dict.fromkeys(started["environment_keys"], ""), "SPECOPS_API_KEY": SCRUBBED}
    assert unit.argv(env) == started["argv"]
    assert started["argv"][:3] == ["/opt/torch/.venv/bin/python", "-m", "sglang.launch_server"]
    # SGLang takes its key on the command line, expanded from the root-only EnvironmentFile.
    assert "SPECOPS_API_KEY" in started["environment_keys"]
    assert "SPECOPS_API_KEY" not in unit.environment
    assert started["argv"][-2:] == ["--api-key", SCRUBBED]
    # flashinfer's JIT finds ninja and nvcc by name: the unit's PATH carries both folders.
    assert unit.environment["PATH"].split(":")[:2] == [
        "/opt/torch/.venv/bin",
        "/usr/local/cuda/bin",
    ]


@pytest.mark.parametrize("name", ["ngram", "draft"])
def test_the_speculative_flags_are_the_translators_for_sglang_0_5_11(name: str) -> None:
    settings = _json(f"units/{name}.json")
    profile = SpeculativeProfile.from_mapping(
        {k: v for k, v in settings["profile"].items() if v is not None}
    )
    expected = to_argv(profile, Engine.parse("sglang", "0.5.11"))
    argv = STEPS[f"config-{name}"]["start"]["argv"]
    assert argv[-len(expected) - 2 : -2] == expected


@pytest.mark.parametrize(
    ("name", "algorithm", "draft_tokens"), [("ngram", "NGRAM", 4), ("draft", "STANDALONE", 4)]
)
def test_sglang_ran_what_was_asked(name: str, algorithm: str, draft_tokens: int) -> None:
    info = _json(f"server-info-{name}.json")
    assert info["speculative_algorithm"] == algorithm
    assert info["speculative_num_draft_tokens"] == draft_tokens
    assert info["attention_backend"] == "triton"
    assert info["disable_radix_cache"] is True
    assert info["version"] == "0.5.11"
    # The key the server holds is answered by /get_server_info: scrubbed before it came back.
    assert info["api_key"] == SCRUBBED


def test_the_flag_list_read_by_sglangs_own_parser_is_the_shipped_one() -> None:
    script = load_script("device/serve-gpu-device.py")
    installed = _json("sglang-0.5.11-flags.json")
    shipped = json.loads((FLAG_LISTS / "sglang-0.5.11-flags.json").read_text())
    diff = script.compare_sglang_flags(installed, shipped)
    assert diff["only_installed"] == []
    assert diff["only_ast"] == []
    assert diff["arity_differs"] == []
    assert diff["choices_differ"] == []
    assert diff["algorithms_installed"] == diff["algorithms_ast"]
    # The device's own comparison (before the shipped list took the installed choices)
    # found exactly the five run-time-built choice lists the AST cannot read.
    found = STEPS["flags"]["compare"]["choices_differ"]
    assert sorted(f.split(":")[0] for f in found) == [
        "--lora-target-modules",
        "--reasoning-parser",
        "--sampling-backend",
        "--speculative-draft-model-quantization",
        "--tool-call-parser",
    ]


def test_every_server_became_ready_and_answered_health_generate() -> None:
    for name in CONFIGS:
        entry = STEPS[f"config-{name}"]
        assert entry["ready"]["ok"] is True
        assert entry["ready"]["detail"] == "generated"
        assert entry["sglang"]["health_generate"]["status"] == 200


@pytest.mark.parametrize("name", ["ngram", "draft"])
def test_acceptance_from_real_sglang_meta_info(name: str) -> None:
    meta = _json(f"generate-{name}.json")["meta_info"]
    acc = acceptance_from_sglang([(meta["completion_tokens"], meta)])
    # SGLang's own figure is completion tokens per verify step; ours is the same sum.
    assert acc.mean_acceptance_length == pytest.approx(meta["spec_accept_length"])
    assert acc.mean_acceptance_length == pytest.approx(
        meta["completion_tokens"] / meta["spec_verify_ct"]
    )
    hist = meta["spec_accept_histogram"]
    assert sum(hist) == meta["spec_verify_ct"]
    assert sum(k * c for k, c in enumerate(hist)) == meta["spec_accepted_drafts"]


def test_plain_answers_no_speculative_fields() -> None:
    meta = _json("generate-plain.json")["meta_info"]
    assert not any(k.startswith("spec_") for k in meta)
    assert (
        acceptance_from_sglang([(meta["completion_tokens"], meta)]).mean_acceptance_length is None
    )


def test_the_output_gate_refused_sglangs_speculative_outputs_on_random_weights() -> None:
    """A finding, not a wish: SGLang 0.5.11's NGRAM and STANDALONE (triton attention)
    changed greedy output against its own plain server on the random-weight 1B model,
    where vLLM 0.20.1's ngram and draft_model matched 1.000 (h200-2026-12-03)."""
    plain = STEPS["config-plain"]["gate"]
    assert plain["ok"] is True
    assert plain["recorded"] == "method none (no speculation)"
    for name in ("ngram", "draft"):
        gate = STEPS[f"config-{name}"]["gate"]
        assert gate["ok"] is False
        assert gate["check"] == "lossless"


@pytest.mark.parametrize("c", [1, 4, 16])
def test_sglang_bench_serving_ran_on_the_same_servers(c: int) -> None:
    rows = {}
    for name in ("plain", "ngram"):
        lines = (RUN / f"p1-{name}-c{c}-1-theirs.jsonl").read_text().strip().splitlines()
        rows[name] = json.loads(lines[-1])
        assert rows[name]["completed"] == 16
        assert rows[name]["max_concurrency"] == c
    assert rows["plain"]["accept_length"] is None
    assert rows["ngram"]["accept_length"] > 1.0


def test_the_scrub_replaces_the_key_in_every_recorded_file(tmp_path: Path) -> None:
    script = load_script("device/serve-gpu-device.py")
    (tmp_path / "a.json").write_text('{"api_key": "k3y-Value"}')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.log").write_text("api_key='k3y-Value' other")
    (tmp_path / "c.txt").write_text("nothing here")
    assert script.scrub(tmp_path, "k3y-Value") == 2
    assert "k3y-Value" not in (tmp_path / "a.json").read_text()
    assert (tmp_path / "sub" / "b.log").read_text() == f"api_key='{SCRUBBED}' other"


def test_no_fixture_file_holds_a_key() -> None:
    for path in RUN.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            for line in text.splitlines():
                if '"api_key":' in line and "null" not in line:
                    assert SCRUBBED in line, path


def _texts(texts: list[str]) -> list[og.Decoded]:
    return [og.Decoded(p, t, None) for p, t in zip(og.PROMPTS, texts, strict=True)]


@pytest.mark.parametrize("name", ["ngram", "draft"])
def test_the_gates_verdict_follows_from_the_recorded_texts(name: str) -> None:
    """SGLang's completions carry no token ids: the gate compared text units. Its
    evaluation of the recorded outputs against plain's reproduces the recorded rates."""
    assert STEPS[f"config-{name}"]["gate_reference_token_ids"] == [None] * len(og.PROMPTS)
    reference = og.Reference(
        "r1b", "/srv/models/r1b", og.prompts_digest(og.PROMPTS), 48, "plain",
        _texts(STEPS["config-plain"]["gate"]["outputs"]),
    )  # fmt: skip
    gate = STEPS[f"config-{name}"]["gate"]
    verdict = og.evaluate(_texts(gate["outputs"]), reference, og.GateConfig(detect_loops=False))
    assert not verdict.ok
    assert gate["compared_on"] == "text units"
    assert verdict.match_rate == pytest.approx(gate["match_rate"], abs=1e-4)
    assert verdict.per_prompt == gate["per_prompt"]
