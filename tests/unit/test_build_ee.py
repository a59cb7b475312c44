"""scripts/release/build-ee.py's pure logic: the inputs' hash (contents, not timestamps; any
input changes it; order does not), the cache decision, and the wheelhouse's
requirements read from execution-environment.yml and the dependency collections."""

from __future__ import annotations

import io
import os
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from plugins.scripts import REPO, load_script

build_ee = load_script("release/build-ee.py")
EE = yaml.safe_load((REPO / "execution-environment.yml").read_text())


def _tarball(path: Path, files: dict[str, bytes], mtime: float) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), mtime
            tar.addfile(info, io.BytesIO(data))
    return path


def _wheel(path: Path, files: dict[str, bytes], date: tuple[int, ...]) -> Path:
    with zipfile.ZipFile(path, "w") as whl:
        for name, data in files.items():
            whl.writestr(zipfile.ZipInfo(name, date_time=date), data)  # type: ignore[arg-type]
    return path


def test_a_tarball_digest_is_its_contents_not_its_timestamps(tmp_path: Path) -> None:
    files = {"MANIFEST.json": b"{}", "roles/a/tasks/main.yml": b"---\n"}
    a = _tarball(tmp_path / "a.tar.gz", files, 1_000_000)
    time.sleep(0.01)
    b = _tarball(tmp_path / "b.tar.gz", dict(reversed(files.items())), time.time())
    assert a.read_bytes() != b.read_bytes()
    assert build_ee.digest_tarball(a) == build_ee.digest_tarball(b)
    c = _tarball(tmp_path / "c.tar.gz", {**files, "roles/a/tasks/main.yml": b"---\n# x\n"}, 0)
    assert build_ee.digest_tarball(c) != build_ee.digest_tarball(a)


def test_a_wheel_digest_is_its_contents_not_its_timestamps(tmp_path: Path) -> None:
    files = {"specops/__init__.py": b"", "specops-0.1.0.dist-info/METADATA": b"Name: specops"}
    a = _wheel(tmp_path / "a.whl", files, (2026, 1, 1, 0, 0, 0))
    b = _wheel(tmp_path / "b.whl", files, (2026, 12, 4, 15, 0, 0))
    assert build_ee.digest_wheel(a) == build_ee.digest_wheel(b)
    c = _wheel(tmp_path / "c.whl", {**files, "specops/cli.py": b"x"}, (2026, 1, 1, 0, 0, 0))
    assert build_ee.digest_wheel(c) != build_ee.digest_wheel(a)


def test_the_inputs_hash_changes_with_any_input_and_not_with_order() -> None:
    parts = {"definition": "d1", "collection": "c1", "wheel": "w1", "base": "b1"}
    h = build_ee.inputs_hash(parts)
    assert h == build_ee.inputs_hash(dict(reversed(parts.items())))
    for key in parts:
        assert build_ee.inputs_hash({**parts, key: "changed"}) != h
    assert build_ee.inputs_hash({**parts, "ee/pkgmgr-apt": "p"}) != h
    assert len(h) == 64


@pytest.mark.parametrize(
    ("labelled", "saved", "force", "want"),
    [
        (True, True, False, "cached"),
        (True, False, False, "cached"),
        (False, True, False, "load"),
        (False, False, False, "build"),
        (True, True, True, "build"),
    ],
)
def test_the_cache_decision(labelled: bool, saved: bool, force: bool, want: str) -> None:
    assert build_ee.decide(labelled=labelled, saved=saved, force=force) == want


def test_the_wheelhouse_holds_what_the_build_installs() -> None:
    reqs = build_ee.wheelhouse_requirements(EE, ["proxmoxer>=2.0"])
    deps = EE["dependencies"]
    assert deps["ansible_core"]["package_pip"] in reqs
    assert deps["ansible_runner"]["package_pip"] in reqs
    assert any(r.startswith("pip==") for r in reqs)  # the base stage's bootstrap
    assert {"bindep", "pyyaml", "packaging", "dumb-init==1.2.5", "proxmoxer>=2.0"} <= set(reqs)
    assert not any(r.startswith("specops") for r in reqs)  # the wheel is added as a file
    assert reqs == sorted(set(reqs))


def test_the_wheelhouse_needs_the_pip_bootstrap_and_the_pins() -> None:
    steps = dict(EE["additional_build_steps"], prepend_base=["RUN true"])
    with pytest.raises(build_ee.BuildError, match="bootstrap-pip"):
        build_ee.wheelhouse_requirements({**EE, "additional_build_steps": steps}, [])
    deps = dict(EE["dependencies"], ansible_runner={})
    with pytest.raises(build_ee.BuildError, match=r"dependencies\.ansible_runner\.package_pip"):
        build_ee.wheelhouse_requirements({**EE, "dependencies": deps}, [])


def test_collection_requirements_as_ansible_builder_reads_them(tmp_path: Path) -> None:
    root = tmp_path
    meta = root / "ansible_collections/community/proxmox"
    (meta / "meta").mkdir(parents=True)
    (meta / "meta/execution-environment.yml").write_text(
        "dependencies:\n  python: meta/ee-requirements.txt\n"
    )
    (meta / "meta/ee-requirements.txt").write_text("# c\nproxmoxer>=2.0\n")
    (meta / "requirements.txt").write_text("pytest\n")  # not read: meta/ names the file
    plain = root / "ansible_collections/ansible/utils"
    plain.mkdir(parents=True)
    (plain / "requirements.txt").write_text("netaddr\njsonschema\n")
    names = ["ansible.utils", "community.proxmox"]
    assert build_ee.collection_requirements(root, names, []) == [
        "netaddr",
        "jsonschema",
        "proxmoxer>=2.0",
    ]
    assert build_ee.collection_requirements(root, names, ["ansible.utils"]) == ["proxmoxer>=2.0"]


def test_constraints_are_requirements_txt_pins_without_extras() -> None:
    pins = build_ee.constraints()
    assert any(p.startswith("ansible-core==") for p in pins)
    assert not any("[" in p for p in pins)
    assert all("==" in p for p in pins)
    assert os.path.basename(build_ee.TOOLS) == "ee-tools"
