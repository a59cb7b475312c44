"""What a lab serving container reads from its node: wheelhouse, tiny model, installer.

A production container installs the engine from an index, fetches weights from the hub
and downloads NVIDIA's installer. Lab containers have none of that, so ``specops lab up``
stages each node's ``/srv/specops-lab`` (``<node root>/srv/specops-lab`` on this machine),
which the lab inventory bind-mounts read-only into every serving container:

- ``wheels/``: the lab wheelhouse (``specops lab vllm wheelhouse``), hard-linked;
- ``models/tiny-qwen/``: the newest tiny model (``specops lab vllm build-model``), copied
  world-readable (the build is root-only; the engine runs as an unprivileged user);
- ``nvidia/<version>/NVIDIA-Linux-x86_64-<version>.run``: the installer stand-in for the
  node's kernel module version, and ``nvidia/runfile.sha256`` (``sha256:<hex>``) for the
  inventory's checksum.

Each part is skipped when its source does not exist (the node has no driver, the
wheelhouse is not built); a re-run changes nothing when the sources did not change.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path

from specops_lab.nvidia_installer_standin import make_runfile

__all__ = ["ASSETS_MOUNT", "MODEL_NAME", "link_or_copy", "newest_model", "stage_node_assets"]

ASSETS_MOUNT = "/srv/specops-lab"
MODEL_NAME = "tiny-qwen"
_BUILD_STAMP = "specops-build.json"


def newest_model(models_dir: Path) -> Path | None:
    """The most recently built tiny model under ``models_dir`` (None when none is built)."""
    stamps = sorted(models_dir.glob(f"*/{_BUILD_STAMP}"), key=lambda p: p.stat().st_mtime)
    return stamps[-1].parent if stamps else None


def link_or_copy(src: Path, dst: Path) -> None:
    """Put ``src`` at ``dst`` atomically: a hard link, or a copy keeping its mtime."""
    tmp = dst.with_name(dst.name + ".part")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    tmp.replace(dst)


def _sync_wheels(src: Path, dst: Path) -> bool:
    dst.mkdir(parents=True, exist_ok=True)
    changed = False
    wanted = {p.name for p in src.iterdir() if p.is_file()}
    for name in sorted(wanted):
        target = dst / name
        source = src / name
        if target.exists() and os.path.samefile(source, target):
            continue
        if (
            target.exists()
            and target.stat().st_size == source.stat().st_size
            and target.read_bytes() == source.read_bytes()
        ):
            continue
        link_or_copy(source, target)
        changed = True
    for stale in dst.iterdir():
        if stale.name not in wanted:
            stale.unlink()
            changed = True
    return changed


def _sync_model(src: Path, dst: Path) -> bool:
    stamp = (src / _BUILD_STAMP).read_bytes()
    if (dst / _BUILD_STAMP).is_file() and (dst / _BUILD_STAMP).read_bytes() == stamp:
        return False
    tmp = dst.with_name(dst.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for item in sorted(src.iterdir()):
        if item.is_file():
            shutil.copyfile(item, tmp / item.name)
            (tmp / item.name).chmod(0o644)
    tmp.chmod(0o755)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.replace(dst)
    return True


def _sync_runfile(version: str, nvidia_dir: Path) -> bool:
    want = nvidia_dir / version / f"NVIDIA-Linux-x86_64-{version}.run"
    sums = nvidia_dir / "runfile.sha256"
    scratch = nvidia_dir / ".build"
    shutil.rmtree(scratch, ignore_errors=True)
    built = make_runfile(version, scratch)
    digest = "sha256:" + hashlib.sha256(built.read_bytes()).hexdigest()
    if want.is_file() and sums.is_file() and sums.read_text().strip() == digest:
        shutil.rmtree(scratch)
        return False
    want.parent.mkdir(parents=True, exist_ok=True)
    built.replace(want)
    want.chmod(0o755)
    sums.write_text(digest + "\n")
    shutil.rmtree(scratch)
    return True


def stage_node_assets(node_root: Path, cache: Path, driver_version: str | None) -> list[str]:
    """Bring ``<node_root>/srv/specops-lab`` up to date; returns the parts that changed."""
    base = node_root / ASSETS_MOUNT.lstrip("/")
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    changed: list[str] = []
    wheels = cache / "wheels"
    if wheels.is_dir() and _sync_wheels(wheels, base / "wheels"):
        changed.append("wheels")
    model = newest_model(cache / "vllm-models")
    if model is not None and _sync_model(model, base / "models" / MODEL_NAME):
        changed.append(f"models/{MODEL_NAME} (from {model.name})")
    if (base / "models").is_dir():
        (base / "models").chmod(0o755)
    if driver_version and _sync_runfile(driver_version, base / "nvidia"):
        changed.append(f"nvidia/{driver_version}")
    return changed
