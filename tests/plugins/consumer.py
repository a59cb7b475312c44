"""A site repository that runs the installed specops, with no checkout on any path
(issue 33's consumer): what an operator who keeps one repository per site has.

:func:`make_site` builds the release artefacts from this checkout (the collection
tarball by ``scripts/build_collection.py``, the controller's wheel as ``pip wheel .``
builds it; the lab's wheel and its ``specops.lab`` collection, which a lab site needs
for its stand-in connections), then, in a fresh directory outside the checkout:

- a new venv from the system's Python with the wheels and ansible-core, constrained by
  the controller's lock (``scripts/lock.py constraints controller``; PyPI, the pip
  cache of ``scripts/setup.sh venv``);
- ``ansible-galaxy collection install --offline`` of both tarballs into the venv's
  site-packages (where Ansible and the controller package both find them, as
  docs/install.md says); the collection's dependencies are found already installed
  there (links to the ``ansible`` bundle's copies: Galaxy is unreachable);
- the site's ``ansible.cfg`` (docs/install.md's), its ``inventory/`` (a copy of
  ``inventory/lab`` with its links to ``inventory/example`` resolved: the example's
  shape with the lab's wiring) and its own copy of the known secrets.

``Site.run`` runs a command of the venv in the site with an environment that names no
checkout path (no ``PYTHONPATH``, no ``ANSIBLE_*`` of the caller).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from plugins.scripts import REPO, load_script

__all__ = ["SITE_CFG", "Site", "copy_secrets", "make_site"]

# docs/install.md's ansible.cfg for a site repository (kept equal: test_site_cfg_is_the_docs).
SITE_CFG = """\
[defaults]
inventory = inventory
vars_plugins_enabled = specops.infra.host_group_vars
callbacks_enabled = specops.infra.node_lock
fact_caching = specops.infra.private_jsonfile
fact_caching_connection = .cache/facts
interpreter_python = auto_silent
[connection]
pipelining = True
"""
DEPENDENCIES = ("community/general", "community/proxmox", "ansible/utils")
BUNDLE = Path(sysconfig.get_paths()["purelib"]) / "ansible_collections"


@dataclass(frozen=True)
class Done:
    argv: list[str]
    rc: int
    output: str
    seconds: float


@dataclass(frozen=True)
class Site:
    root: Path
    venv: Path
    secret_args: list[str]
    build_seconds: float

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def purelib(self) -> Path:
        code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        out = subprocess.run([str(self.bin / "python"), "-c", code],
                             capture_output=True, text=True, check=True)  # fmt: skip
        return Path(out.stdout.strip())

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV"))}  # fmt: skip
        env |= {"PATH": f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin", "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_FORCE_COLOR": "0", **extra}  # fmt: skip
        return env

    def run(self, *argv: str, timeout: float = 1800, **extra_env: str) -> Done:
        start = time.monotonic()
        proc = subprocess.run(
            [str(self.bin / argv[0]), *argv[1:]], cwd=self.root, env=self.env(**extra_env),
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        seconds = time.monotonic() - start
        return Done(list(argv), proc.returncode, proc.stdout + proc.stderr, seconds)


def _check(argv: list[str], **kwargs: object) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        said = f"{proc.stdout}{proc.stderr}"
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{said}")
    return str(proc.stdout)


def build_wheel(project: Path, name: str, out: Path) -> Path:
    """``pip wheel .`` of ``project`` (pyproject.toml + src/), from a copy: the build
    leaves nothing in the checkout."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        shutil.copy2(project / "pyproject.toml", tree)
        for part in ("src", "templates"):  # templates/: src/specops/templates links to it
            if (project / part).is_dir():
                skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
                shutil.copytree(project / part, tree / part, symlinks=True, ignore=skip)
        _check([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                "--no-index", "-q", "-w", str(out), "."], cwd=tree)  # fmt: skip
    (wheel,) = out.glob(f"{name}-*-py3-none-any.whl")
    return wheel


def constraints(out: Path) -> Path:
    """The controller's lock as a pip constraints file (``scripts/lock.py constraints
    controller``), as docs/install.md has an operator install the wheel."""
    path = out / "constraints.txt"
    path.write_text(load_script("lock.py").constraints(REPO / "requirements.lock"))
    return path


def copy_secrets(
    folder: Path, vars_file: Path, vault_password_file: Path, key_file: Path
) -> list[str]:
    """The known secrets, copied into the site (0700 folder, 0600 files); the vars file's
    key-file path rewritten to the copy."""
    folder.mkdir(mode=0o700)
    copies = {}
    for src in (vars_file, vault_password_file, key_file):
        dst = folder / src.name
        dst.touch(mode=0o600)
        dst.write_bytes(src.read_bytes())
        copies[src] = dst
    text = copies[vars_file].read_text().replace(str(key_file), str(copies[key_file]))
    copies[vars_file].write_text(text)
    password = str(copies[vault_password_file])
    return ["-e", f"@{copies[vars_file]}", "--vault-password-file", password]


def make_site(vars_file: Path, vault_password_file: Path, key_file: Path) -> Site:
    """The consumer's site in a new directory under /var/tmp (see the module's doc)."""
    start = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="specops-site-", dir="/var/tmp"))
    dist = root / "dist"
    dist.mkdir()
    tarball = load_script("build_collection.py").build(REPO, dist)
    lab_collection = REPO / "collections/ansible_collections/specops/lab"
    _check([str(Path(sys.executable).parent / "ansible-galaxy"), "collection", "build",
            str(lab_collection), "--output-path", str(dist)])  # fmt: skip
    (lab_tarball,) = dist.glob("specops-lab-*.tar.gz")
    wheels = [build_wheel(REPO, "specops", dist), build_wheel(REPO / "lab", "specops_lab", dist)]
    core = next(line for line in (REPO / "requirements.txt").read_text().splitlines()
                if line.startswith("ansible-core=="))  # fmt: skip

    venv = root / "venv"
    _check(["/usr/bin/python3", "-m", "venv", str(venv)])
    _check([str(venv / "bin/pip"), "install", "-q", "-c", str(constraints(dist)),
            *map(str, wheels), core])  # fmt: skip
    site = Site(root, venv, [], 0.0)
    installed = site.purelib / "ansible_collections"
    for dep in DEPENDENCIES:  # already installed, as Galaxy would have put them
        (installed / dep).parent.mkdir(parents=True, exist_ok=True)
        (installed / dep).symlink_to(BUNDLE / dep)
    done = site.run("ansible-galaxy", "collection", "install", "--offline",
                    "-p", str(site.purelib), str(tarball), str(lab_tarball))  # fmt: skip
    if done.rc != 0:
        raise RuntimeError(done.output)

    (root / "ansible.cfg").write_text(SITE_CFG)
    inventory = root / "inventory"
    shutil.copytree(REPO / "inventory/lab", inventory, symlinks=False,
                    ignore=shutil.ignore_patterns("hardware", "differences.yml"))  # fmt: skip
    args = copy_secrets(root / "secrets", vars_file, vault_password_file, key_file)
    return Site(root, venv, args, time.monotonic() - start)
