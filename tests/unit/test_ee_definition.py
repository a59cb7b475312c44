"""execution-environment.yml (issue 33): the ansible-builder v3 fields, the collection
tarball and the controller's wheel in it, pins that agree with the rest of the
repository, and the two helpers it runs on the Debian base (ee/pkgmgr-apt,
ee/bootstrap-pip.py). The build itself and the image: tests/ee/."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import re
import subprocess
import threading
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from plugins.scripts import REPO, load_script

EE = yaml.safe_load((REPO / "execution-environment.yml").read_text())
GALAXY = yaml.safe_load(
    (REPO / "collections/ansible_collections/specops/infra/galaxy.yml").read_text()
)
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# ansible-builder 3.2's top-level keys of a version 3 definition.
V3_KEYS = {"version", "images", "options", "build_arg_defaults", "dependencies",
           "additional_build_files", "additional_build_steps"}  # fmt: skip
build_ee = load_script("release/build-ee.py")


def _bootstrap() -> Any:
    """ee/bootstrap-pip.py as a module."""
    spec = importlib.util.spec_from_file_location("bootstrap_pip", REPO / "ee/bootstrap-pip.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _steps(section: str) -> list[str]:
    return [str(s) for s in EE["additional_build_steps"].get(section) or []]


def _pin(name: str) -> str:
    lines = (REPO / "requirements.txt").read_text().splitlines()
    return next(line for line in lines if line.startswith(f"{name}=="))


def test_it_is_a_version_3_definition_on_the_projects_base() -> None:
    assert EE["version"] == 3
    assert set(EE) <= V3_KEYS
    setup = (REPO / "scripts/setup.sh").read_text()
    image = re.search(r"IMAGE=\$\{SPECOPS_IMAGE:-(\S+)\}", setup)
    assert image
    assert EE["images"]["base_image"]["name"] == image[1]


def test_the_collection_and_the_wheel_are_in_it() -> None:
    deps = EE["dependencies"]
    assert deps["galaxy"]["collections"] == [
        {"name": "inputs/specops-infra.tar.gz", "type": "file"}
    ]
    files = {(f["src"], f["dest"]) for f in EE["additional_build_files"]}
    # build_ee.py writes what the EE file copies into the build context.
    tarball = build_ee.INPUTS / "specops-infra.tar.gz"
    assert (str(tarball.relative_to(REPO)), "inputs") in files
    assert (str((build_ee.INPUTS / "collections").relative_to(REPO)), "inputs/collections") in files
    # The controller package at the one version of the repository: its wheel by file,
    # never the name `specops` from an index (PyPI's is not ours).
    version = PYPROJECT["project"]["version"]
    assert version == GALAXY["version"]
    wheel = f"specops-{version}-py3-none-any.whl"
    assert deps["python"] == [f"specops @ file:///output/specops/{wheel}"]
    assert build_ee.wheel_named(EE) == wheel
    assert (str((build_ee.INPUTS / "wheel").relative_to(REPO)), "inputs/wheel") in files
    # ... where the builder stage installs it and the final stage finds it (/output)
    assert "COPY _build/inputs/wheel/ /output/specops/" in _steps("prepend_builder")


def test_ansible_core_and_runner_are_the_repositorys_pins() -> None:
    deps = EE["dependencies"]
    assert deps["ansible_core"]["package_pip"] == _pin("ansible-core")
    assert re.fullmatch(r"ansible-runner==[\d.]+", deps["ansible_runner"]["package_pip"])
    assert deps["python_interpreter"]["python_path"] == "/usr/bin/python3"


def test_galaxy_is_not_reached_and_the_dependencies_are_in_place() -> None:
    assert "--offline" in EE["build_arg_defaults"]["ANSIBLE_GALAXY_CLI_COLLECTION_OPTS"]
    assert "COPY _build/inputs/collections/ /usr/share/ansible/collections/" in _steps(
        "prepend_galaxy"
    )
    assert build_ee.dependency_collections() == sorted(GALAXY["dependencies"])


def test_the_debian_base_gets_its_package_manager_and_pip() -> None:
    options = EE["options"]
    assert options["skip_pip_install"] is True
    base = _steps("prepend_base")
    assert f"COPY _build/ee/pkgmgr-apt {options['package_manager_path']}" in base
    assert any(re.search(r"bootstrap-pip\.py pip==[\d.]+", s) for s in base)
    # The wheelhouse's pip config lives in the build only.
    assert "ARG PIP_FIND_LINKS" in base
    assert "RUN rm -f /etc/pip.conf" in _steps("append_final")
    for src in ("ee/pkgmgr-apt", "ee/bootstrap-pip.py"):
        assert {"src": src, "dest": "ee"} in EE["additional_build_files"]
        assert (REPO / src).is_file()
    assert os.access(REPO / "ee/pkgmgr-apt", os.X_OK)


@pytest.fixture
def fake_apt(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "apt-get $*" >> {log}\n')
    (bin_dir / "apt-get").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    return log, env


def _pkgmgr(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(REPO / "ee/pkgmgr-apt"), *args], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip


def test_pkgmgr_apt_takes_ansible_builders_calls_to_apt(fake_apt: Any) -> None:
    log, env = fake_apt
    assert _pkgmgr(env, "install", "-y", "--nodocs", "--setopt", "install_weak_deps=0",
                   "openssh-client", "git").returncode == 0  # fmt: skip
    assert log.read_text().splitlines() == [
        "apt-get update -qq",
        "apt-get install -y -qq --no-install-recommends openssh-client git",
    ]
    log.unlink()
    assert _pkgmgr(env, "install", "-y").returncode == 0  # nothing to install: no apt call
    assert not log.exists()
    assert _pkgmgr(env, "clean", "all").returncode == 0
    assert log.read_text().splitlines() == ["apt-get clean"]
    bad = _pkgmgr(env, "remove", "x")
    assert bad.returncode == 2
    assert "unsupported command 'remove'" in bad.stderr
    bad = _pkgmgr(env, "install", "--enablerepo", "epel", "x")
    assert bad.returncode == 2
    assert "unknown option --enablerepo" in bad.stderr


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    root = tmp_path / "house"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_bootstrap_pip_finds_its_wheel_in_the_served_wheelhouse(
    served: tuple[Path, str],
) -> None:
    root, url = served
    boot = _bootstrap()
    wheel = "pip-26.3-py3-none-any.whl"
    with zipfile.ZipFile(root / wheel, "w") as z:
        z.writestr("pip/__init__.py", "")
    (root / "pip-26.2-py3-none-any.whl").write_bytes(b"other")
    assert boot.from_find_links(url, wheel) == (root / wheel).read_bytes()
    assert boot.from_find_links(str(root), wheel) == (root / wheel).read_bytes()
    assert boot.from_find_links(url, "pip-1.0-py3-none-any.whl") is None
    assert boot.main(["pip"]) == 2  # a pin is required


def test_bootstrap_pip_refuses_pypi_when_the_build_says_no_index(
    served: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = served
    boot = _bootstrap()
    monkeypatch.setenv("PIP_FIND_LINKS", url)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert boot.main(["pip==26.3"]) == 1
    assert "pip-26.3-py3-none-any.whl is not in PIP_FIND_LINKS" in capsys.readouterr().err


def test_a_definition_that_names_the_wheel_by_index_is_refused() -> None:
    deps = {**EE["dependencies"], "python": ["specops==0.2.0"]}
    with pytest.raises(build_ee.BuildError, match="by file: never a name from an index"):
        build_ee.wheel_named({**EE, "dependencies": deps})


def test_the_collection_says_what_an_ee_needs_for_it() -> None:
    """meta/execution-environment.yml (ansible-builder reads it from the installed
    collection): pve_container's proxmoxer and requests, the SSH client."""
    infra = REPO / "collections/ansible_collections/specops/infra"
    meta = yaml.safe_load((infra / "meta/execution-environment.yml").read_text())
    assert meta["version"] == 1
    python = (infra / meta["dependencies"]["python"]).read_text().split("\n")
    assert {"proxmoxer>=2.0", "requests>=2.31"} <= set(python)
    system = (infra / meta["dependencies"]["system"]).read_text()
    assert "openssh-clients [platform:rpm]" in system
    assert "openssh-client [platform:dpkg]" in system
    pve = (infra / "plugins/modules/pve_container.py").read_text()
    assert "requirements:\n  - proxmoxer >= 2.0" in pve
    # the build's lock holds them (the wheelhouse serves them)
    missing = build_ee.missing_from_lock(
        build_ee.collection_requirements(REPO / "collections", ["specops.infra"], []),
        load_script("release/lock.py").pins(REPO / "ee/requirements.lock"),
    )
    assert missing == []


UPSTREAM = yaml.safe_load((REPO / "ee/upstream/execution-environment.yml").read_text())


def test_the_upstream_definition_has_the_same_content_on_the_images_python() -> None:
    """ee/upstream/execution-environment.yml: an upstream EE base (Automation Platform's
    ee-minimal), its own Python (python_path, nothing installed as the system Python),
    microdnf; the same collection, wheel, pins and exclusions as the project's EE."""
    assert set(UPSTREAM) <= V3_KEYS
    assert UPSTREAM["images"]["base_image"]["name"].startswith("registry.redhat.io/")
    interpreter = UPSTREAM["dependencies"]["python_interpreter"]
    assert interpreter == {"python_path": "/usr/bin/python3.11"}
    assert UPSTREAM["options"] == {"package_manager_path": "/usr/bin/microdnf"}
    for key in ("ansible_core", "ansible_runner", "galaxy", "python", "exclude"):
        assert UPSTREAM["dependencies"][key] == EE["dependencies"][key], key
    ours = {
        (f["src"].removeprefix("../../"), f["dest"]) for f in UPSTREAM["additional_build_files"]
    }
    assert ours == {(f["src"], f["dest"]) for f in EE["additional_build_files"]
                    if not f["src"].startswith("ee/")}  # fmt: skip
    steps = UPSTREAM["additional_build_steps"]
    assert steps["prepend_builder"] == _steps("prepend_builder")
    assert steps["prepend_galaxy"] == _steps("prepend_galaxy")
    assert not any("pkgmgr-apt" in s or "bootstrap-pip" in s for s in steps["prepend_base"])


def test_the_standin_base_offers_what_the_upstream_definition_uses() -> None:
    """CI's stand-in of the upstream base: the Python at python_path with pip, the
    package manager at package_manager_path, ansible-core and ansible-runner."""
    text = (REPO / "ee/upstream/standin/Containerfile").read_text()
    assert f"COPY pkgmgr-apt {UPSTREAM['options']['package_manager_path']}" in text
    python = UPSTREAM["dependencies"]["python_interpreter"]["python_path"]
    assert f"{python} /tmp/bootstrap-pip.py" in text
    assert f"{python} -m pip install" in text
    deps = UPSTREAM["dependencies"]
    assert f"ARG CORE={deps['ansible_core']['package_pip']}" in text
    assert f"ARG RUNNER={deps['ansible_runner']['package_pip']}" in text
    assert f'specops.standin-of="{UPSTREAM["images"]["base_image"]["name"]}"' in text
