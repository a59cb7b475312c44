"""`specops lab up` stages what lab serving containers read from their node."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from specops_lab.assets import ASSETS_MOUNT, stage_node_assets


def _cache(tmp: Path) -> Path:
    cache = tmp / "cache"
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / "a-1.0-py3-none-any.whl").write_bytes(b"wheel a")
    (cache / "wheels" / ".specops-wheelhouse.json").write_text("{}\n")
    old = cache / "vllm-models" / "tiny-qwen-old"
    new = cache / "vllm-models" / "tiny-qwen-new"
    for build, stamp in ((old, "1"), (new, "2")):
        build.mkdir(parents=True)
        (build / "config.json").write_text(f'{{"build": {stamp}}}\n')
        (build / "model.safetensors").write_bytes(b"weights")
        (build / "model.safetensors").chmod(0o600)  # as the lab's build leaves it
        (build / "specops-build.json").write_text(f'{{"build": {stamp}}}\n')
    os.utime(old / "specops-build.json", (1, 1))
    return cache


def test_stage_converges_and_follows_its_sources(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    node = tmp_path / "pve-b"
    changed = stage_node_assets(node, cache, "580.126.09")
    assert changed == [
        "wheels",
        "models/tiny-qwen (from tiny-qwen-new)",
        "nvidia/580.126.09",
    ]
    base = node / ASSETS_MOUNT.lstrip("/")
    wheel = base / "wheels" / "a-1.0-py3-none-any.whl"
    assert os.path.samefile(wheel, cache / "wheels" / "a-1.0-py3-none-any.whl")
    model = base / "models" / "tiny-qwen"
    assert (model / "config.json").read_text() == '{"build": 2}\n', "the newest build"
    # The engine runs as an unprivileged user: the staged copy is world-readable.
    assert (model / "model.safetensors").stat().st_mode & 0o777 == 0o644
    assert model.stat().st_mode & 0o777 == 0o755
    runfile = base / "nvidia" / "580.126.09" / "NVIDIA-Linux-x86_64-580.126.09.run"
    digest = hashlib.sha256(runfile.read_bytes()).hexdigest()
    assert (base / "nvidia" / "runfile.sha256").read_text() == f"sha256:{digest}\n"
    assert os.access(runfile, os.X_OK)

    assert stage_node_assets(node, cache, "580.126.09") == [], "a re-run changes nothing"

    (cache / "wheels" / "a-1.0-py3-none-any.whl").unlink()
    (cache / "wheels" / "b-2.0-py3-none-any.whl").write_bytes(b"wheel b")
    (cache / "vllm-models" / "tiny-qwen-old" / "specops-build.json").touch()
    assert stage_node_assets(node, cache, "580.126.09") == [
        "wheels",
        "models/tiny-qwen (from tiny-qwen-old)",
    ]
    assert sorted(p.name for p in (base / "wheels").iterdir()) == [
        ".specops-wheelhouse.json",
        "b-2.0-py3-none-any.whl",
    ]
    assert (model / "config.json").read_text() == '{"build": 1}\n'


def test_node_without_driver_or_builds_gets_what_exists(tmp_path: Path) -> None:
    node = tmp_path / "pve-a"
    assert stage_node_assets(node, tmp_path / "empty-cache", None) == []
    base = node / ASSETS_MOUNT.lstrip("/")
    assert base.is_dir()
    assert not (base / "nvidia").exists()
