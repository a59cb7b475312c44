"""The lab's tiny model: built once per builder input, cached under the cache root.

The build runs :mod:`specops_lab.tiny_model_builder` with the vLLM venv's python
(torch, transformers, tokenizers are there). The cache key is a digest of the
builder's source, its spec and the venv's library versions, so changing any of them
builds a new folder beside the old one. A folder is complete when its marker is
there; builds happen in a temporary folder renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from specops.errors import SpecopsError
from specops_lab import tiny_model_builder
from specops_lab.tiny_model_builder import TinyModelSpec
from specops_lab.vllm_install import LabPaths, file_lock, installed_versions, lab_paths

__all__ = ["BuildResult", "TinyModelSpec", "build_model", "model_dir", "model_key"]

_MARKER = "specops-build.json"
_OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@dataclass(frozen=True)
class BuildResult:
    path: Path
    changed: bool
    seconds: float


def _versions_or_fail(paths: LabPaths) -> dict[str, str]:
    versions = installed_versions(paths)
    if versions is None:
        raise SpecopsError(
            f"vllm model: the vLLM venv {paths.venv} is not installed; "
            "run `specops lab vllm install` first"
        )
    return versions


def model_key(spec: TinyModelSpec, versions: dict[str, str]) -> str:
    """A digest of everything that decides the built files."""
    digest = hashlib.sha256()
    digest.update(Path(tiny_model_builder.__file__).read_bytes())
    digest.update(spec.to_json().encode())
    for name in ("torch", "transformers", "tokenizers"):
        digest.update(f"{name}={versions.get(name, '')}\n".encode())
    return digest.hexdigest()[:16]


def model_dir(paths: LabPaths | None = None, spec: TinyModelSpec | None = None) -> Path:
    """Where the model for ``spec`` lives (built or not)."""
    paths = paths or lab_paths()
    spec = spec or TinyModelSpec()
    return paths.models / f"tiny-qwen-{model_key(spec, _versions_or_fail(paths))}"


def build_model(
    paths: LabPaths | None = None,
    spec: TinyModelSpec | None = None,
    *,
    out: Path | None = None,
) -> BuildResult:
    """Build the tiny model unless the cached one is complete.

    ``out`` builds into that folder instead of the cache (used to check determinism).
    """
    paths = paths or lab_paths()
    spec = spec or TinyModelSpec()
    start = time.monotonic()
    target = out if out is not None else model_dir(paths, spec)
    if (target / _MARKER).exists():
        return BuildResult(target, False, time.monotonic() - start)
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / f".{target.name}.lock"):
        if (target / _MARKER).exists():
            return BuildResult(target, False, time.monotonic() - start)
        tmp = target.parent / f".{target.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), **_OFFLINE_ENV}
        proc = subprocess.run(
            [
                str(paths.python),
                tiny_model_builder.__file__,
                "--out",
                str(tmp),
                "--spec",
                spec.to_json(),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            check=False,
        )
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tail = "\n".join(proc.stdout.splitlines()[-25:])
            raise SpecopsError(f"vllm model: building the tiny model failed:\n{tail}")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    return BuildResult(target, True, time.monotonic() - start)


def build_info(path: Path) -> dict[str, object]:
    """The builder's record of a built model folder."""
    try:
        data = json.loads((path / _MARKER).read_text())
    except (OSError, ValueError) as exc:
        raise SpecopsError(f"vllm model: {path} is not a built model ({exc})") from exc
    if not isinstance(data, dict):
        raise SpecopsError(f"vllm model: {path / _MARKER} is not a JSON object")
    return data


if __name__ == "__main__":  # pragma: no cover
    result = build_model()
    print(result, file=sys.stderr)
