"""DFlash drafter preflight: raw config.json of the drafter against the target's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils import dflash_drafter as core

from specops.errors import ValidationError
from specops.speculative import drafter


def _load(base: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((base / name / "config.json").read_text())
    return data


@pytest.fixture
def target(drafter_fixtures: Path) -> dict[str, Any]:
    return _load(drafter_fixtures, "qwen3_6-27b-target")


@pytest.fixture
def good(drafter_fixtures: Path) -> dict[str, Any]:
    return _load(drafter_fixtures, "qwen3_6-27b-dflash")


def _fields(findings: list[core.DrafterFinding]) -> list[str]:
    return [f.field for f in findings]


def test_package_uses_the_module_utils_code() -> None:
    assert drafter.check_drafter_config is core.check_drafter_config
    assert drafter.DrafterFinding is core.DrafterFinding


def test_seed_drafter_passes(target: dict[str, Any], good: dict[str, Any]) -> None:
    assert core.check_drafter_config(target, good, window=2048, num_draft_tokens=16) == []


def test_seed_corruption_is_caught_field_by_field(
    drafter_fixtures: Path, target: dict[str, Any]
) -> None:
    bad = _load(drafter_fixtures, "qwen3_6-27b-dflash-corrupted")
    findings = core.check_drafter_config(target, bad, window=2048)
    assert [(f.field, f.found) for f in findings] == [
        ("drafter.dflash_config.mask_token_id", 248320),
        ("drafter.dflash_config.target_layer_ids[4]", 66),
        ("drafter.layer_types", ["full_attention"] * 5),
    ]
    assert findings[0].message == (
        "drafter.dflash_config.mask_token_id: found 248320, expected 0 <= id < target"
        " vocab_size (248320)"
    )
    assert findings[1].expected == (
        "0 <= id < target num_hidden_layers (64) (DFlash's default spacing for this pair is"
        " [1, 16, 31, 46, 61])"
    )
    assert findings[2].expected.startswith(
        "sliding_attention layers (the profile expects a 2048-token draft window); every"
        " layer is full_attention"
    )
    # Without an expected window, the contradiction inside the file still shows.
    no_window = core.check_drafter_config(target, bad)
    assert _fields(no_window) == [
        "drafter.dflash_config.mask_token_id",
        "drafter.dflash_config.target_layer_ids[4]",
        "drafter.layer_types",
    ]
    assert "use_sliding_window is true and sliding_window is 2048" in no_window[2].expected


def _mutate(config: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(config))
    for dotted, value in changes.items():
        node = out
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        if value is core.ABSENT:
            del node[leaf]
        else:
            node[leaf] = value
    return out


CASES: list[tuple[dict[str, Any], dict[str, Any], list[tuple[str, Any, str]]]] = [
    (
        {"layer_types": core.ABSENT},
        {},
        [("drafter.layer_types", "absent", "a list with one entry per drafter layer"
          " (num_hidden_layers=5), each one of ['sliding_attention', 'full_attention'] (when"
          " it is absent, transformers rebuilds it from max_window_layers and every layer"
          " becomes full_attention)")],
    ),
    (
        {"layer_types": ["sliding_attention"] * 4},
        {},
        [("drafter.layer_types", ["sliding_attention"] * 4,
          "one entry per drafter layer (num_hidden_layers=5), got 4")],
    ),
    (
        {"layer_types": ["sliding_attention"] * 4 + ["linear_attention"]},
        {},
        [("drafter.layer_types[4]", "linear_attention",
          "one of ['sliding_attention', 'full_attention']")],
    ),
    (
        {"use_sliding_window": False},
        {},
        [("drafter.use_sliding_window", False, "true (it has sliding_attention layers; with"
          " false, transformers and engines drop sliding_window)")],
    ),
    (
        {"sliding_window": 4096},
        {"window": 2048},
        [("drafter.sliding_window", 4096, "2048, the profile's draft_window")],
    ),
    (
        {"sliding_window": None},
        {},
        [("drafter.sliding_window", None, "a positive integer")],
    ),
    (
        {"dflash_config__mask_token_id": "<|MASK|>"},
        {},
        [("drafter.dflash_config.mask_token_id", "<|MASK|>",
          "an integer token id of the target vocabulary")],
    ),
    (
        {"dflash_config__target_layer_ids": [1, 16, 16, 46, 61]},
        {},
        [("drafter.dflash_config.target_layer_ids", [1, 16, 16, 46, 61],
          "distinct layer indices")],
    ),
    (
        {"dflash_config__target_layer_ids": []},
        {},
        [("drafter.dflash_config.target_layer_ids", [], "a non-empty list of target layer"
          " indices (DFlash's default spacing for this pair is [1, 16, 31, 46, 61])")],
    ),
    (
        {"num_target_layers": 36},
        {},
        [("drafter.num_target_layers", 36, "64, the target's num_hidden_layers")],
    ),
    (
        {"dflash_config": core.ABSENT},
        {},
        [
            ("drafter.dflash_config", "absent", "an object with mask_token_id and"
             " target_layer_ids (is this a DFlash drafter?)"),
            ("drafter.dflash_config.mask_token_id", "absent",
             "an integer token id of the target vocabulary"),
            ("drafter.dflash_config.target_layer_ids", "absent", "a non-empty list of target"
             " layer indices (DFlash's default spacing for this pair is [1, 16, 31, 46, 61])"),
        ],
    ),
    (
        {},
        {"num_draft_tokens": 32},
        [("speculative.num_draft_tokens", 32,
          "<= the drafter's block_size (16); it was trained on blocks of 16")],
    ),
    (
        {"sliding_window": 8},
        {"window": 8},
        [("speculative.draft_window", 8, ">= the drafter's block_size (16)")],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "kwargs", "expected"), CASES)
def test_each_field_is_named_with_found_and_expected(
    target: dict[str, Any],
    good: dict[str, Any],
    changes: dict[str, Any],
    kwargs: dict[str, Any],
    expected: list[tuple[str, Any, str]],
) -> None:
    findings = core.check_drafter_config(target, _mutate(good, **changes), **kwargs)
    assert [(f.as_dict()["field"], f.as_dict()["found"], f.expected) for f in findings] == expected


def test_flat_target_and_unwindowed_drafter(drafter_fixtures: Path) -> None:
    target = drafter_fixtures / "qwen3-8b-target"
    dflash = drafter_fixtures / "qwen3-8b-dflash-b16"
    assert core.check_drafter_dirs(str(target), str(dflash)) == []
    # The same drafter cannot serve a profile that expects a 2048 window.
    assert _fields(core.check_drafter_dirs(str(target), str(dflash), window=2048)) == [
        "drafter.use_sliding_window",
        "drafter.sliding_window",
        "drafter.layer_types",
    ]


def test_mask_id_is_checked_against_the_target_tokenizer(
    drafter_fixtures: Path, tmp_path: Path
) -> None:
    dflash = tmp_path / "drafter"
    dflash.mkdir()
    config = _load(drafter_fixtures, "qwen3-8b-dflash-b16")
    config["dflash_config"]["mask_token_id"] = 151668  # in range, but not <|MASK|>
    (dflash / "config.json").write_text(json.dumps(config))
    findings = core.check_drafter_dirs(str(drafter_fixtures / "qwen3-8b-target"), str(dflash))
    assert [f.message for f in findings] == [
        "drafter.dflash_config.mask_token_id: found 151668, expected 151669, the id of"
        " '<|MASK|>' in the target tokenizer_config.json"
    ]


def test_missing_or_broken_files_are_findings(tmp_path: Path, drafter_fixtures: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    findings = core.check_drafter_dirs(str(tmp_path / "nowhere"), str(tmp_path))
    assert [f.field for f in findings] == ["target", "drafter"]
    assert findings[0].expected == "an existing config.json"
    assert findings[1].expected.startswith("a readable JSON file (")


def test_validate_drafter_raises_naming_the_first_field(
    target: dict[str, Any], drafter_fixtures: Path
) -> None:
    bad = _load(drafter_fixtures, "qwen3_6-27b-dflash-corrupted")
    with pytest.raises(ValidationError) as caught:
        drafter.validate_drafter(target, bad, window=2048)
    assert caught.value.field == "drafter.dflash_config.mask_token_id"
    assert str(caught.value).startswith(
        "drafter.dflash_config.mask_token_id: found 248320, expected 0 <= id < target"
        " vocab_size (248320) (and 2 more: drafter.dflash_config.target_layer_ids[4]: found 66"
    )
    drafter.validate_drafter(
        drafter_fixtures / "qwen3_6-27b-target", drafter_fixtures / "qwen3_6-27b-dflash"
    )


def test_module_utils_is_stdlib_only() -> None:
    source = Path(core.__file__).read_text()
    imports = {
        line.split()[1].split(".")[0]
        for line in source.splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imports <= {"__future__", "json", "os", "collections", "dataclasses", "typing"}
