"""The lab's oracle builds: the CI oracle cached beside the tiny model, and builds on demand.

:func:`build_oracle` runs ``python -m specops_lab.oracle build`` with the lab's vLLM venv
python (torch, safetensors, tokenizers are there) into a temporary folder renamed into
place, under a lock, as :mod:`specops_lab.vllm_model` does for the tiny model. The
cache key hashes the spec, every source file of the builder and the venv's torch and
tokenizers versions: a change to any of them builds a new folder beside the old one.

:data:`CI_SPECS` are the oracles the CPU tests serve (``scripts/setup.sh vllm`` builds
them): :data:`CI_SPEC`, the MiMo family in the ``cpu`` shape, cycles of 8 tokens, the
noise calibrated in float32 (what the lab's CPU vLLM computes in), whose target serves no
speculation, ``ngram``, ``mtp`` and (with ``drafter/``) ``draft_model`` (docs/testing.md
gives the measured speed-ups); and :data:`CI_DRAFTERS_SPEC`, the Llama family in the
``tiny`` shape, whose EAGLE3 and DFlash drafters the lab's vLLM loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

import ansible_collections.specops.infra.plugins.module_utils.dflash_drafter as _dflash
import ansible_collections.specops.infra.plugins.module_utils.errors as _errors

import specops_lab
from specops.errors import SpecopsError, ValidationError
from specops_lab import tiny_model_builder
from specops_lab.oracle.spec import RECORD_NAME, OracleSpec
from specops_lab.vllm_install import LabPaths, file_lock, installed_versions, lab_paths
from specops_lab.vllm_model import BuildResult

__all__ = [
    "CI_DRAFTERS_SPEC",
    "CI_SPEC",
    "CI_SPECS",
    "build_oracle",
    "oracle_dir",
    "oracle_key",
    "oracle_record",
    "pythonpath",
]

CI_SPEC: Final = OracleSpec(
    families=("mtp",), shape="cpu", cycle=8, calibration_dtype="float32", noise_alpha=0.7
)
# The Llama family for the drafters the CPU build can load: EAGLE3, and DFlash with one
# (full-attention) layer, since vLLM CPU 0.32 builds no mixed sliding/full drafter.
CI_DRAFTERS_SPEC: Final = OracleSpec(
    families=("draft_model", "dflash", "eagle3"), shape="tiny", cycle=8,
    calibration_dtype="float32", noise_alpha=None, dflash_layers=1,
)  # fmt: skip
CI_SPECS: Final = (CI_SPEC, CI_DRAFTERS_SPEC)
_HERE = Path(__file__).resolve().parent
# What decides the files: the builder's modules (not this one, not the CLI), the
# tokenizer's corpus list and DFlash's layer rule.
_SOURCES = (
    *(_HERE / f"{name}.py" for name in ("spec", "tokenizer", "weights", "reference",
                                         "calibrate", "builder", "selfcheck", "__main__")),
    Path(tiny_model_builder.__file__),
    Path(_dflash.__file__),
)  # fmt: skip
_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def pythonpath() -> str:
    """``lab/src`` and the collection root: what ``python -m specops_lab.oracle`` imports."""
    lab_src = Path(specops_lab.__file__).resolve().parent.parent
    # <root>/ansible_collections/specops/infra/plugins/module_utils/errors.py
    collections = Path(_errors.__file__).resolve().parents[5]
    return f"{lab_src}{os.pathsep}{collections}"


def oracle_key(spec: OracleSpec, versions: dict[str, str]) -> str:
    """A digest of everything that decides the built files."""
    digest = hashlib.sha256(spec.to_json().encode())
    for source in _SOURCES:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    for name in ("torch", "tokenizers"):
        digest.update(f"{name}={versions.get(name, '')}\n".encode())
    return digest.hexdigest()[:16]


def _versions(paths: LabPaths) -> dict[str, str]:
    versions = installed_versions(paths)
    if versions is None:
        raise SpecopsError(
            f"oracle: the vLLM venv {paths.venv} is not installed (it has the builder's"
            " torch); run `specops lab vllm install` first"
        )
    return versions


def oracle_dir(paths: LabPaths | None = None, spec: OracleSpec = CI_SPEC) -> Path:
    """Where the build of ``spec`` lives in the cache (built or not)."""
    paths = paths or lab_paths()
    key = oracle_key(spec, _versions(paths))
    return paths.models / f"oracle-{spec.target}-{spec.shape}-{key}"


def build_oracle(
    paths: LabPaths | None = None,
    spec: OracleSpec = CI_SPEC,
    *,
    out: Path | None = None,
    device: str = "cpu",
    check: bool = True,
    python: Path | None = None,
    shard_mb: float | None = None,
) -> BuildResult:
    """Build ``spec`` unless its folder is complete (has the record); ``out`` instead of
    the cache; ``python`` instead of the venv's; ``shard_mb`` the largest shard file."""
    paths = paths or lab_paths()
    began = time.monotonic()
    target = out if out is not None else oracle_dir(paths, spec)
    if (target / RECORD_NAME).exists():
        return BuildResult(target, False, time.monotonic() - began)
    if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValidationError(
            "--out", f"{out} exists and is not an oracle build: give a new (or empty) folder"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / f".{target.name}.lock"):
        if (target / RECORD_NAME).exists():
            return BuildResult(target, False, time.monotonic() - began)
        tmp = target.parent / f".{target.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        argv = [str(python or paths.python), "-m", "specops_lab.oracle", "build",
                *(a for f in spec.families for a in ("--family", f)),
                "--shape", spec.shape, "--out", str(tmp), "--device", device,
                "--spec", json.dumps({k: v for k, v in spec.to_dict().items()
                                      if k not in ("families", "shape")})]  # fmt: skip
        if not check:
            argv.append("--no-check")
        if shard_mb is not None:
            argv += ["--shard-mb", str(shard_mb)]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "PYTHONPATH": pythonpath(),
               **_ENV}  # fmt: skip
        proc = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            kept = target.parent / f".{target.name}.failed"
            shutil.rmtree(kept, ignore_errors=True)
            if tmp.exists():
                tmp.rename(kept)
            tail = "\n".join(proc.stdout.splitlines()[-25:])
            raise SpecopsError(
                f"oracle: building {spec.to_json()} failed (kept in {kept}):\n{tail}"
            )
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    return BuildResult(target, True, time.monotonic() - began)


def oracle_record(path: Path) -> dict[str, Any]:
    """The builder's record of a built oracle folder."""
    try:
        data = json.loads((path / RECORD_NAME).read_text())
    except (OSError, ValueError) as exc:
        raise SpecopsError(f"oracle: {path} is not a built oracle ({exc})") from exc
    if not isinstance(data, dict):
        raise SpecopsError(f"oracle: {path / RECORD_NAME} is not a JSON object")
    return data


if __name__ == "__main__":  # pragma: no cover
    print(build_oracle(), file=sys.stderr)
