"""pytest plugin: specops' execution environment, built once per session, and
``ansible-navigator`` running the collection's playbooks in it, as AWX's execution
nodes run a job (ansible-runner inside the EE).

Fixtures:

- ``ee_image``: ``scripts/build_ee.py`` once per session (built, or reused from the
  image labelled with its inputs' hash, or loaded from its ``docker save`` under
  /var/cache/specops/ee); the :class:`EeImage` it made.

:func:`navigator` runs ``ansible-navigator`` from the tool venv in a directory (a site:
its ``ansible.cfg`` and ``inventory/``), with the container on the host's network
(``--net=host``: 127.0.0.1 in the container is this machine's), stdout mode, no pull
and no artifact; extra container options (mounts, devices) as ``container_options``,
each one word (``--volume=A:B``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from plugins.scripts import REPO, load_script

__all__ = ["EeImage", "Navigated", "navigator", "site_dir"]

# ansible-runner's event markers in the stdout it relays (ESC[K<base64>ESC[<n>D).
_EVENT_MARK = re.compile(r"\x1b\[K(?:[A-Za-z0-9+/=]+\x1b\[\d+D)?")
SITE_CFG = """\
[defaults]
inventory = inventory
vars_plugins_enabled = specops.infra.host_group_vars
interpreter_python = auto_silent
[connection]
pipelining = True
"""
RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class EeImage:
    tag: str
    image_id: str
    inputs: str
    how: str  # built, cached or loaded
    seconds: float
    tools: Path

    @property
    def navigator_bin(self) -> Path:
        return self.tools / "bin/ansible-navigator"


@dataclass(frozen=True)
class Navigated:
    argv: list[str]
    rc: int
    output: str
    seconds: float

    def recap(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for m in RECAP.finditer(self.output):
            host = out.setdefault(m["host"], {"changed": 0, "failed": 0, "unreachable": 0})
            for key in host:
                host[key] += int(m[key])
        return out


def build() -> EeImage:
    """scripts/build_ee.py's :func:`make` (the tag specops/ee:latest)."""
    build_ee = load_script("build_ee.py")
    result = build_ee.make()
    return EeImage(result.tag, result.image_id, result.digest, result.how, result.seconds,
                   build_ee.TOOLS)  # fmt: skip


@pytest.fixture(scope="session")
def ee_image() -> EeImage:
    if shutil.which("docker") is None:
        pytest.fail("docker is missing: run scripts/setup.sh packages docker image")
    return build()


def site_dir(root: Path, inventory: Path = REPO / "inventory/example") -> Path:
    """A site under ``root``: the docs' ansible.cfg (results/ lands beside it) and a copy
    of ``inventory`` (links resolved)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "ansible.cfg").write_text(SITE_CFG)
    shutil.copytree(inventory, root / "inventory", symlinks=False,
                    ignore=shutil.ignore_patterns("hardware", "differences.yml"))  # fmt: skip
    return root


def navigator(
    ee: EeImage,
    site: Path,
    *args: str,
    container_options: Sequence[str] = (),
    timeout: float = 1200,
) -> Navigated:
    """``ansible-navigator <args>`` in ``site`` with the EE (see the module's doc)."""
    options = ["--net=host", *container_options]
    sub, *rest = args  # the subcommand (run, exec), then its arguments (exec: -- CMD last)
    # (exec fails with --pae: it writes no playbook artifact anyway)
    artifact = ["--pae", "false"] if sub == "run" else []
    argv = [str(ee.navigator_bin), sub, "--mode", "stdout", "--ee", "true",
            "--eei", ee.tag, "--pull-policy", "never", "--ce", "docker", *artifact,
            "--lf", "/dev/null", *(f"--co={o}" for o in options), *rest]  # fmt: skip
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV"))}  # fmt: skip
    env |= {"PATH": f"{ee.tools / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin", "NO_COLOR": "1"}
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=site, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    output = _EVENT_MARK.sub("", proc.stdout + proc.stderr)
    return Navigated(argv, proc.returncode, output, time.monotonic() - start)
