"""The lab's container connection (``specops.lab.container``) against a real LXC container
made by the PVE stand-in: modules are piped (one attach per module, as ssh with
pipelining), files go in and come out byte for byte (larger than a pipe's buffer),
``become_user`` works through the pipe, and a container that is not running is an
unreachable host whose message names it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from specops_lab.pve import pct
from specops_lab.pve.layout import DEFAULT_LXCPATH, Node, init_cluster
from specops_lab.pve.testing import TEMPLATE_NAME, destroy_lab_containers

pytestmark = [pytest.mark.lxc, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
NODE = "conn-a"
VMID = 971
CT = "conn-ct971"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory, rootfs_tarball: Path) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("conn-lab")
    node = Node(name=NODE, root=base / NODE, cgroup="v2", lxcpath=DEFAULT_LXCPATH)
    cluster = init_cluster(base / "cluster", [node], name="connlab")
    template = node.host_path("/var/lib/vz/template/cache") / TEMPLATE_NAME
    try:
        os.link(rootfs_tarball, template)
    except OSError:
        shutil.copy(rootfs_tarball, template)
    hosts = {
        CT: {
            "ansible_connection": "specops.lab.container",
            "ansible_host": node.lxc_name(VMID),
            "ansible_python_interpreter": "/usr/bin/python3",
        },
        "gone-ct": {
            "ansible_connection": "specops.lab.container",
            "ansible_host": f"{NODE}-979",
            "ansible_python_interpreter": "/usr/bin/python3",
        },
    }
    path = base / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    try:
        pct.ct_create(
            None,
            node,
            VMID,
            ostemplate=f"local:vztmpl/{TEMPLATE_NAME}",
            options={"hostname": CT},
        )
        pct.ct_start(node, VMID)
        yield path
    finally:
        destroy_lab_containers(cluster)


def ansible(inventory: Path, host: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "-i", str(inventory), host, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_module_is_one_attach_with_the_module_on_stdin(inventory: Path) -> None:
    run = ansible(inventory, CT, "-m", "ansible.builtin.ping", "-vvv")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "Pipelining is enabled." in run.stdout
    execs = re.findall(r"EXEC (.*)", run.stdout)
    assert len(execs) == 1, execs  # no mkdir/put/chmod/rm round trips
    assert "lxc-attach" in execs[0]
    assert "--clear-env" in execs[0]
    assert "PUT " not in run.stdout


def test_files_go_in_and_come_out_byte_for_byte(inventory: Path, tmp_path: Path) -> None:
    src = tmp_path / "blob"
    src.write_bytes(os.urandom(3 << 20))  # larger than a pipe's buffer, binary
    put = ansible(
        inventory, CT, "-m", "ansible.builtin.copy", "-a", f"src={src} dest=/root/blob mode=0600"
    )
    assert put.returncode == 0, put.stdout[-3000:]
    back = tmp_path / "back"
    got = ansible(
        inventory,
        CT,
        "-m",
        "ansible.builtin.fetch",
        "-a",
        f"src=/root/blob dest={back} flat=true",
    )
    assert got.returncode == 0, got.stdout[-3000:]
    assert back.read_bytes() == src.read_bytes()
    missing = ansible(
        inventory,
        CT,
        "-m",
        "ansible.builtin.fetch",
        "-a",
        f"src=/root/no-such-file dest={tmp_path / 'none'} flat=true fail_on_missing=true",
    )
    assert missing.returncode != 0
    assert not (tmp_path / "none").exists()


def test_become_user_runs_through_the_pipe(inventory: Path) -> None:
    run = ansible(
        inventory,
        CT,
        "-b",
        "--become-user",
        "nobody",
        "-m",
        "ansible.builtin.command",
        "-a",
        "id -u",
    )
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.stdout.split(">>", 1)[1].split() == ["65534"], run.stdout[-2000:]


def test_a_container_that_is_not_running_is_unreachable_and_named(inventory: Path) -> None:
    run = ansible(inventory, "gone-ct", "-m", "ansible.builtin.ping")
    assert run.returncode == 4, run.stdout[-2000:]  # unreachable, not a task failure
    assert f"container {NODE}-979 under {DEFAULT_LXCPATH} is not running" in run.stdout
