"""A site repository that runs the installed specops, with no checkout on any path
(issues 33, 50): what an operator who keeps one repository per site has.

:func:`make_site` builds the release artefacts from this checkout as a release does
(``scripts/release/release.py dist``: the collection tarball, the controller's wheel, the
controller's lock as pip constraints; plus the lab's wheel and its ``specops.lab``
collection, which a lab site needs for its stand-in connections), then, in a fresh
directory outside the checkout, follows docs/install.md with the site files it shows
(docs/site/: ``ansible.cfg``, ``requirements.txt``, ``requirements.yml``):

- ``python3 -m venv .venv`` and ``pip install -c dist/constraints.txt -r
  requirements.txt``: the wheel pulls ansible-core and its other dependencies, the
  ``ansible`` bundle brings the dependency collections (PyPI, the pip cache of
  ``scripts/setup.sh venv``);
- ``ansible-galaxy collection install -r requirements.yml --offline`` into the site's
  ``collections/`` (its ansible.cfg's ``collections_path``), the dependencies found in
  the bundle (Galaxy is unreachable);
- its ``inventory/`` (a copy of ``inventory/lab`` with its links to
  ``inventory/example`` resolved: the example's shape with the lab's wiring) and its
  own copy of the known secrets, given as an operator gives them: the server's API key
  file and the vaulted token in ``group_vars/all`` (so the playbooks that the CLI and
  the sweep start get them too), the vault password file through
  ``ANSIBLE_VAULT_PASSWORD_FILE``.

``Site.run`` runs a command of the venv in the site with an environment that names no
checkout path (no ``PYTHONPATH``, no ``ANSIBLE_*`` of the caller);
``Site.checkout_leaks`` lists every place one would show: the environment, the site
Python's ``sys.path``, where ``specops`` and the collection are imported from.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from plugins.scripts import REPO, load_script

__all__ = ["SITE_CFG", "SITE_FILES", "Site", "copy_secrets", "make_site"]

# A site repository's files as docs/install.md shows them (the docs include them).
SITE_FILES = REPO / "docs/site"
SITE_CFG = (SITE_FILES / "ansible.cfg").read_text()


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
    vault_password_file: Path | None = None

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
        if self.vault_password_file is not None:
            env["ANSIBLE_VAULT_PASSWORD_FILE"] = str(self.vault_password_file)
        return env

    def checkout_leaks(self) -> list[str]:
        """Where this checkout would show in the site's runs: the environment's ``PATH``,
        ``PYTHON*`` and ``ANSIBLE_*`` values, the site Python's ``sys.path``, and the
        files ``specops`` and the collection specops.infra are imported from there."""
        leaks = [f"{k}={v}" for k, v in self.env().items()
                 if k == "PATH" or k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV"))
                 if str(REPO) in v]  # fmt: skip
        code = ("import json, sys, specops, specops.collection as c\n"
                "print(json.dumps({'sys.path': sys.path, 'specops': specops.__file__,"
                " 'collection': str(c.require(specops.__version__))}))")  # fmt: skip
        done = self.run("python", "-c", code)
        if done.rc != 0:
            return [f"the site's Python failed: {done.output}"]
        found = json.loads(next(x for x in reversed(done.output.splitlines()) if x[:1] == "{"))
        leaks += [f"sys.path: {p}" for p in found["sys.path"] if str(REPO) in p]
        if not found["specops"].startswith(str(self.venv)):
            leaks.append(f"specops imported from {found['specops']}")
        if not found["collection"].startswith(str(self.root / "collections")):
            leaks.append(f"specops.infra found at {found['collection']}")
        return leaks

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


def build_wheel(project: Path, out: Path) -> Path:
    """The wheel of ``project`` (the repository or its ``lab``) by scripts/release/build-wheel.py,
    as a release builds it: ``pip wheel`` of a copy, nothing left in the checkout."""
    return Path(load_script("release/build-wheel.py").build(project, out))


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
    load_script("release/release.py").dist(root / "dist")  # tarball, wheel, constraints.txt
    lab = root / "lab-dist"  # the lab's own, which only a lab site installs
    _check([str(Path(sys.executable).parent / "ansible-galaxy"), "collection", "build",
            str(REPO / "collections/ansible_collections/specops/lab"), "--output-path",
            str(lab)])  # fmt: skip
    (lab_tarball,) = lab.glob("specops-lab-*.tar.gz")
    lab_wheel = build_wheel(REPO / "lab", lab)
    for name in ("ansible.cfg", "requirements.txt", "requirements.yml"):
        shutil.copy2(SITE_FILES / name, root / name)

    _check(["/usr/bin/python3", "-m", "venv", str(root / ".venv")])
    site = Site(root, root / ".venv", [], 0.0)
    for argv in (
        ("pip", "install", "-q", "-c", "dist/constraints.txt", "-r", "requirements.txt",
         str(lab_wheel)),
        ("ansible-galaxy", "collection", "install", "--offline", "-r", "requirements.yml"),
        ("ansible-galaxy", "collection", "install", "--offline", str(lab_tarball)),
    ):  # fmt: skip
        done = site.run(*argv)
        if done.rc != 0:
            raise RuntimeError(f"{' '.join(argv)} failed in {root}:\n{done.output}")

    inventory = root / "inventory"
    shutil.copytree(REPO / "inventory/lab", inventory, symlinks=False,
                    ignore=shutil.ignore_patterns("hardware", "differences.yml"))  # fmt: skip
    args = copy_secrets(root / "secrets", vars_file, vault_password_file, key_file)
    # the secrets as an operator's inventory holds them: every playbook run gets them,
    # those the CLI starts too (specops doctor, the sweep's applier)
    shutil.copy2(root / "secrets" / vars_file.name, inventory / "group_vars/all/secrets.yml")
    return Site(root, root / ".venv", args[:2], time.monotonic() - start,
                root / "secrets" / vault_password_file.name)  # fmt: skip
