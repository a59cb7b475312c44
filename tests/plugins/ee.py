"""pytest plugin: specops' execution environment, built once per session, and
``ansible-navigator`` running the collection's playbooks in it, as AWX's execution
nodes run a job (ansible-runner inside the EE).

Fixtures:

- ``ee_image``: ``scripts/release/build-ee.py`` once per session (built, or reused from the
  image labelled with its inputs' hash, or loaded from its ``docker save`` under
  /var/cache/specops/ee); the :class:`EeImage` it made.
- ``upstream_ee_image``: the same for ee/upstream/execution-environment.yml, built on
  the local stand-in of its upstream base (``--standin-base``: no registry in CI).

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
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from plugins.scripts import REPO, load_script

__all__ = ["LAB_CONTAINER_OPTIONS", "EeImage", "Navigated", "lab_image", "navigator", "site_dir"]

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
    output: str  # stdout and stderr, for messages and for what a person reads
    seconds: float
    stdout: str = ""  # what a test parses as data (a dependency's warnings go to stderr)

    def recap(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for m in RECAP.finditer(self.output):
            host = out.setdefault(m["host"], {"changed": 0, "failed": 0, "unreachable": 0})
            for key in host:
                host[key] += int(m[key])
        return out


def build(*, upstream: bool = False) -> EeImage:
    """scripts/release/build-ee.py's :func:`make`: the project's EE (specops/ee:latest), or with
    ``upstream`` the upstream-base one on its stand-in (specops/ee-upstream:latest)."""
    build_ee = load_script("release/build-ee.py")
    if upstream:
        result = build_ee.make(build_ee.UPSTREAM_TAG, definition=build_ee.UPSTREAM_FILE,
                               standin_base=True)  # fmt: skip
    else:
        result = build_ee.make()
    return EeImage(result.tag, result.image_id, result.digest, result.how, result.seconds,
                   build_ee.TOOLS)  # fmt: skip


@pytest.fixture(scope="session")
def ee_image() -> EeImage:
    if shutil.which("docker") is None:
        pytest.fail("docker is missing: run scripts/setup.sh packages docker image")
    return build()


@pytest.fixture(scope="session")
def upstream_ee_image() -> EeImage:
    if shutil.which("docker") is None:
        pytest.fail("docker is missing: run scripts/setup.sh packages docker image")
    return build(upstream=True)


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
    image: str | None = None,
    timeout: float = 1200,
) -> Navigated:
    """``ansible-navigator <args>`` in ``site`` with the EE (see the module's doc)."""
    options = ["--net=host", *container_options]
    sub, *rest = args  # the subcommand (run, exec), then its arguments (exec: -- CMD last)
    # (exec fails with --pae: it writes no playbook artifact anyway)
    artifact = ["--pae", "false"] if sub == "run" else []
    argv = [str(ee.navigator_bin), sub, "--mode", "stdout", "--ee", "true",
            "--eei", image or ee.tag, "--pull-policy", "never", "--ce", "docker", *artifact,
            "--lf", "/dev/null", *(f"--co={o}" for o in options), *rest]  # fmt: skip
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV"))}  # fmt: skip
    env |= {"PATH": f"{ee.tools / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin", "NO_COLOR": "1"}
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=site, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    output = _EVENT_MARK.sub("", proc.stdout + proc.stderr)
    return Navigated(argv, proc.returncode, output, time.monotonic() - start,
                     _EVENT_MARK.sub("", proc.stdout))  # fmt: skip


# --- the lab through the EE (tests/deploy/test_deploy_lab.py)
#
# A test-only layer over the EE, never shipped: the lab's own collection specops.lab
# (its connections: lxc-attach into the lab's containers, a lab node's root on this
# machine), its package specops_lab (the PVE stand-in's CLIs the lab inventory calls) and
# Debian's lxc tools (and lxc-templates, whose common configs the lab's containers
# include). The container then sees what the lab's connections need of this
# machine: its LXC containers (--pid=host, the cgroup tree, /var/lib/lxc, /run/lxc) and
# the lab's node trees (/var/lib/specops/lab). A lab node's stand-in tools name the
# interpreter of whoever ran `specops lab up`: that path is linked to the EE's Python,
# which carries specops_lab in this layer.
LAB_IMAGE = "specops/ee-lab:test"
LAB_DIR = Path("/var/lib/specops/lab")
LAB_CONTAINER_OPTIONS = (
    "--pid=host",
    "--cgroupns=host",
    "--cap-add=ALL",
    "--cap-drop=SYS_RESOURCE",  # outside this machine's bounding set (--privileged fails)
    "--security-opt=seccomp=unconfined",
    "--security-opt=apparmor=unconfined",
    "--volume=/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--volume=/var/lib/lxc:/var/lib/lxc",
    "--volume=/run/lxc:/run/lxc",
    f"--volume={LAB_DIR}:{LAB_DIR}",
)
_SHIM_PYTHON = re.compile(r"^exec (\S+) -m specops_lab\.node ", re.MULTILINE)


def _shim_interpreters() -> list[str]:
    found = set()
    for shim in LAB_DIR.glob("*/usr/*bin/*"):
        if shim.is_file() and shim.stat().st_size < 4096:
            found |= set(_SHIM_PYTHON.findall(shim.read_text(errors="replace")))
    return sorted(found)


def lab_image(
    ee: EeImage,
    *,
    tag: str = LAB_IMAGE,
    pkgmgr: str = "/usr/local/bin/pkgmgr-apt",
    python: str = "/usr/bin/python3",
) -> str:
    """``specops/ee-lab:test`` (or ``tag``): the layer above ``ee``, whose package manager
    and Python are ``pkgmgr`` and ``python`` (the upstream-base EE's: /usr/bin/microdnf,
    /usr/bin/python3.11). Docker's cache keeps it while nothing in it changes."""
    from plugins.consumer import build_wheel  # noqa: PLC0415  (only the lab tests need it)

    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp)
        build_wheel(REPO / "lab", ctx)
        galaxy = Path(sys.executable).parent / "ansible-galaxy"
        subprocess.run([str(galaxy), "collection", "build", "--output-path", str(ctx),
                        str(REPO / "collections/ansible_collections/specops/lab")],
                       check=True, capture_output=True)  # fmt: skip
        links = "".join(
            f"RUN mkdir -p {Path(p).parent} && ln -sfn {python} {p}\n" for p in _shim_interpreters()
        )
        (ctx / "Dockerfile").write_text(
            f"FROM {ee.tag}\n"
            # First: not the EE. build_ee.py finds the EE by this label, which FROM passes
            # on to every step's image of this build (docker lists the newest while it runs).
            "LABEL specops.test=lab specops.ee.inputs=\n"
            # lxc-attach needs root: the lab's layer runs as root (the EE as uid 1000)
            "USER root\n"
            # lxc-templates: the <ostype>.common.conf every lab container's config includes
            f"RUN {pkgmgr} install -y lxc lxc-templates && {pkgmgr} clean all\n"
            "COPY specops_lab-*.whl specops-lab-*.tar.gz /tmp/lab/\n"
            f"RUN {python} -m pip install -q --no-deps --no-index --no-cache-dir /tmp/lab/*.whl"
            " && ansible-galaxy collection install --offline"
            " -p /usr/share/ansible/collections /tmp/lab/*.tar.gz && rm -rf /tmp/lab\n"
            f"{links}"
        )
        proc = subprocess.run(["docker", "build", "--network", "host", "-t", tag, str(ctx)],
                              capture_output=True, text=True, check=False,
                              env={**os.environ, "DOCKER_BUILDKIT": "0"})  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"docker build {tag} failed:\n{proc.stdout[-4000:]}"
                               f"{proc.stderr[-4000:]}")  # fmt: skip
    return tag
