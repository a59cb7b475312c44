"""The drafter preflight for every drafter: known drafters, hub-id lookup, sha256 pins."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.drafter_check import (
    check,
    hub_id_of,
    resolve,
)

SEED = "z-lab/Qwen3.6-27B-DFlash"


def _hub(cache: Path, repo_id: str, source: Path, commit: str = "c" * 40) -> Path:
    """Put ``source`` into a hub cache the way huggingface_hub lays it out."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    shutil.copytree(source, snapshot)
    return snapshot


def _fields(findings: list[Any]) -> list[tuple[str, Any]]:
    return [(f.field, f.as_dict()["found"]) for f in findings]


FLATTENED = [
    ("drafter.layer_types", ["full_attention"] * 5),
    ("drafter.use_sliding_window", False),
    ("drafter.sliding_window", None),
]


def test_resaved_window_off_is_caught_without_a_window(drafter_fixtures: Path) -> None:
    target = str(drafter_fixtures / "qwen3_6-27b-target")
    resaved = str(drafter_fixtures / "qwen3_6-27b-dflash-resaved")
    # Nothing inside the file contradicts itself: the DFlash rules alone pass it.
    by_id = check("dflash", target, resaved, drafter_id=SEED)
    assert _fields(by_id.findings) == FLATTENED
    assert by_id.known == SEED
    assert "4 sliding_attention + 1 full_attention" in by_id.findings[0].expected
    # A local copy with no hub id is recognised by its target's and its own shape.
    local = check("dflash", target, resaved)
    assert _fields(local.findings) == FLATTENED
    assert local.known == f"{SEED} (recognised by its target's and its own shape)"
    # ddtree uses the same drafter
    assert _fields(check("ddtree", target, resaved).findings) == FLATTENED


def test_hub_id_drafter_is_checked_in_the_cache_it_was_downloaded_to(
    drafter_fixtures: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "hub"
    snap = _hub(cache, SEED, drafter_fixtures / "qwen3_6-27b-dflash-resaved")
    where, why = resolve(SEED, "main", str(cache))
    assert (where, why) == (str(snap), "")
    assert hub_id_of(str(snap)) == SEED
    report = check("dflash", str(drafter_fixtures / "qwen3_6-27b-target"), str(where))
    assert report.known == SEED  # from the cache path, before any shape matching
    assert _fields(report.findings) == FLATTENED
    assert resolve(SEED, "c" * 40, str(cache)) == (str(snap), "")
    missing, why = resolve("z-lab/Other-DFlash", "main", str(cache))
    assert missing is None
    assert "not in the hub cache" in why
    assert "inference_engine downloads it" in why


def test_the_seed_drafter_passes_with_every_dflash_key_pinned(drafter_fixtures: Path) -> None:
    report = check(
        "dflash", str(drafter_fixtures / "qwen3_6-27b-target"),
        str(drafter_fixtures / "qwen3_6-27b-dflash"), drafter_id=SEED, window=2048,
        num_draft_tokens=16,
    )  # fmt: skip
    assert report.findings == []
    assert report.warnings == [
        f"{drafter_fixtures / 'qwen3_6-27b-target'} has no tokenizer_config.json: the mask"
        " token id was checked only against the vocabulary size",
    ]


def test_the_seed_drafter_with_shifted_ids_and_another_mask_is_refused(
    drafter_fixtures: Path, tmp_path: Path
) -> None:
    """Issue 49: ids [2, 17, 32, 47, 62] (every one in range, distinct) and mask 248076
    (in the vocabulary) are consistent with the target: only the table's pins catch them,
    and they are errors, not a warning."""
    config = json.loads((drafter_fixtures / "qwen3_6-27b-dflash" / "config.json").read_text())
    config["dflash_config"] = {"mask_token_id": 248076, "target_layer_ids": [2, 17, 32, 47, 62]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    report = check(
        "dflash", str(drafter_fixtures / "qwen3_6-27b-target"), str(tmp_path), drafter_id=SEED
    )
    assert [(f.field, f.found) for f in report.findings] == [
        ("drafter.dflash_config.mask_token_id", 248076),
        ("drafter.dflash_config.target_layer_ids", [2, 17, 32, 47, 62]),
    ]
    assert "248070 (known drafter z-lab/Qwen3.6-27B-DFlash" in report.findings[0].expected
    assert not any("pins no" in w for w in report.warnings)


def test_unknown_drafter_warns_what_was_not_checked(drafter_fixtures: Path) -> None:
    report = check(
        "dflash", str(drafter_fixtures / "qwen3-8b-target"),
        str(drafter_fixtures / "qwen3-8b-dflash-b16"), drafter_id="z-lab/Qwen3-8B-DFlash-b16",
    )  # fmt: skip
    assert report.findings == []
    assert report.known == ""
    (warning,) = report.warnings
    assert warning.startswith(
        "unknown drafter z-lab/Qwen3-8B-DFlash-b16: not checked: its layer pattern and"
        " sliding window against the checkpoint it came from; its mask token and target"
        " layer ids against the checkpoint (add it to inference_service_drafter_known or pin"
        " inference_service_drafter_config_sha256: "
    )


def test_inventory_entries_and_sha256_pins(drafter_fixtures: Path, tmp_path: Path) -> None:
    target = str(drafter_fixtures / "qwen3-8b-target")
    drafter = drafter_fixtures / "qwen3-8b-dflash-b16"
    digest = hashlib.sha256((drafter / "config.json").read_bytes()).hexdigest()
    assert check("dflash", target, str(drafter), config_sha256=digest).findings == []
    assert check("dflash", target, str(drafter), config_sha256=digest).warnings[-1:] == []
    wrong = check("dflash", target, str(drafter), config_sha256="0" * 64)
    assert [f.field for f in wrong.findings] == ["drafter.config.json"]
    assert wrong.findings[0].expected.startswith("sha256 " + "0" * 64)
    known = {
        str(drafter): {
            "expect": {"dflash_config.mask_token_id": 151669, "block_size": 8},
            "source": "our model registry",
        }
    }
    report = check("dflash", target, str(drafter), known=known)
    assert [(f.field, f.expected) for f in report.findings] == [
        (
            "drafter.block_size",
            f"8 (known drafter {drafter}: our model registry)",
        )
    ]


def _config(tmp: Path, name: str, data: dict[str, Any]) -> Path:
    path = tmp / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("method", "drafter", "fields"),
    [
        ("eagle3", {"hidden_size": 4096, "vocab_size": 151936, "draft_vocab_size": 32000}, []),
        ("eagle3", {"hidden_size": 2048, "vocab_size": 151936}, ["drafter.hidden_size"]),
        ("eagle", {"hidden_size": 4096, "vocab_size": 32000}, ["drafter.vocab_size"]),
        ("draft_model", {"hidden_size": 1024, "vocab_size": 151936}, []),
        ("draft_model", {"hidden_size": 1024, "vocab_size": 151643}, ["drafter.vocab_size"]),
        # a draft model with sliding layers but the window switched off
        ("draft_model", {"vocab_size": 151936, "num_hidden_layers": 2,
                         "layer_types": ["sliding_attention", "full_attention"],
                         "use_sliding_window": False, "sliding_window": None},
         ["drafter.use_sliding_window", "drafter.sliding_window"]),
    ],
)  # fmt: skip
def test_other_drafters(
    tmp_path: Path, drafter_fixtures: Path, method: str, drafter: dict[str, Any], fields: list[str]
) -> None:
    path = _config(tmp_path, "d", drafter)
    report = check(method, str(drafter_fixtures / "qwen3-8b-target"), str(path))
    assert [f.field for f in report.findings] == fields
