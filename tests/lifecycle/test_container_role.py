"""playbooks/container.yml against the lab PVE API stand-in over real LXC.

One container (vmid 801 on lab node lifecycle-a, LXC name lifecycle-a-801) goes through
its life in order: bad descriptions fail before any API write, check mode writes
nothing, the first run creates and starts it, the second changes nothing, a cores/memory
change is applied online, a rootfs shrink is refused, a hostname change is only reported.
Every request the stand-in saw is a schema-valid call the project declares.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.modules import pve_container as module
from lifecycle_lab import (
    COMMUNITY_PROXMOX_CALLS,
    FAST,
    FAST_PATH,
    NODE,
    PlayResult,
    container_vars,
    make_cluster,
    run_playbook,
    write_inventory,
)

from specops_lab.pve.layout import Cluster
from specops_lab.pve.testing import ApiHandle, running_api, stop_lab_containers
from specops_lab.pve_schema import ApiError, find_endpoint

pytestmark = [pytest.mark.lxc, pytest.mark.slow]

VMID = 801
HOST = "lifecycle-ct801"
LXC_NAME = f"{NODE}-{VMID}"
_REQUEST = re.compile(r'"(GET|POST|PUT|DELETE) /api2/json(\S*) HTTP/1\.1" (\d{3})')


@pytest.fixture(scope="module")
def lab(
    tmp_path_factory: pytest.TempPathFactory, rootfs_tarball: Path
) -> Iterator[tuple[Cluster, ApiHandle, Path]]:
    base = tmp_path_factory.mktemp("lifecycle")
    cluster = make_cluster(base, rootfs_tarball)
    try:
        with running_api(cluster.dir) as api:
            yield cluster, api, base
    finally:
        stop_lab_containers(cluster)
        node = cluster.node(NODE)
        for d in node.lxcpath.glob(f"{NODE}-8*"):
            shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(node.root, ignore_errors=True)  # rootfs copies and backups (GBs)


def requests_since(cluster: Cluster, offset: int) -> list[tuple[str, str, int]]:
    text = (cluster.dir / "api.log").read_text()[offset:]
    return [(m[1], m[2], int(m[3])) for m in _REQUEST.finditer(text)]


def log_size(cluster: Cluster) -> int:
    return len((cluster.dir / "api.log").read_text())


def conf_tree(cluster: Cluster) -> dict[str, str]:
    root = cluster.node(NODE).root / "etc" / "pve"
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.conf"))}


def play(cluster: Cluster, api: ApiHandle, base: Path, *args: str, **over: Any) -> PlayResult:
    inventory = write_inventory(
        base / "hosts.yml", cluster, api, {HOST: container_vars(VMID, **over)}
    )
    return run_playbook(inventory, api, *args)


def lxc_state() -> tuple[str, str]:
    out = subprocess.run(
        ["lxc-info", "-n", LXC_NAME, "-s", "-p"], capture_output=True, text=True, check=False
    ).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return fields.get("State", "").strip(), fields.get("PID", "").strip()


def ct_conf(cluster: Cluster) -> str:
    return cluster.node(NODE).ct_conf(VMID).read_text()


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"pve_container_vmid": 850}, "pve_container_vmid", "taken by VM 'trainer'"),
        (
            {"pve_container_rootfs_storage": "fast-ssd"},
            "pve_container_rootfs_storage",
            "does not exist",
        ),
        (
            {"pve_container_ostemplate": "local:vztmpl/ubuntu.tar.zst"},
            "pve_container_ostemplate",
            "is not on node",
        ),
        ({"pve_container_memory": 100_000_000}, "pve_container_memory", "more than node"),
        ({"pve_container_memory": "lots"}, "pve_container_memory", "unable to convert to int"),
    ],
)
def test_01_bad_input_fails_before_any_write(
    lab: tuple[Cluster, ApiHandle, Path], over: dict[str, Any], field: str, words: str
) -> None:
    cluster, api, base = lab
    vm = cluster.node(NODE).vm_conf(850)
    vm.write_text("name: trainer\nmemory: 4096\ncores: 2\n")
    before, offset = conf_tree(cluster), log_size(cluster)
    if over.get("pve_container_vmid") == 850:
        over = {**over, "ansible_host": f"{NODE}-850"}
    result = play(cluster, api, base, **over)
    assert result.rc != 0, result.output
    assert field in result.output, result.output[-3000:]
    assert words in result.output
    writes = [r for r in requests_since(cluster, offset) if r[0] != "GET"]
    assert writes == []
    assert conf_tree(cluster) == before
    assert api.token_value not in result.output


def test_02_check_mode_shows_the_plan_and_writes_nothing(
    lab: tuple[Cluster, ApiHandle, Path],
) -> None:
    cluster, api, base = lab
    before, offset = conf_tree(cluster), log_size(cluster)
    result = play(cluster, api, base, "--check", "--diff")
    assert result.rc == 0, result.output
    assert '+    "hostname": "lifecycle-ct801"' in result.output
    assert result.count(HOST, "changed") > 0
    assert [r for r in requests_since(cluster, offset) if r[0] != "GET"] == []
    assert conf_tree(cluster) == before


def test_03_absent_container_is_created_started_and_reachable(
    lab: tuple[Cluster, ApiHandle, Path],
) -> None:
    cluster, api, base = lab
    assert not cluster.node(NODE).ct_conf(VMID).exists()
    result = play(cluster, api, base)
    assert result.rc == 0, result.output
    assert result.count(HOST, "changed") >= 3  # mount source, create, tags, start
    conf = ct_conf(cluster)
    for line in (
        "cores: 1",
        "memory: 512",
        "swap: 0",
        "hostname: lifecycle-ct801",
        "features: nesting=1",
        "mp0: /var/cache/specops-models,mp=/var/cache/specops,shared=1",
        "onboot: 1",
        "tags: lifecycle;specops",
        "unprivileged: 0",
    ):
        assert line in conf.splitlines(), conf
    assert re.search(r"^rootfs: local:801/subvol-801-disk-0\.subvol,size=4G$", conf, re.M), conf
    assert lxc_state()[0] == "RUNNING"
    # handed over: the facts other roles read
    assert (
        f"CT 801 (lifecycle-ct801) on node {NODE}, reached with specops.lab.container as {LXC_NAME}"
        in " ".join(result.output.split())  # the yaml callback wraps long lines
    )
    # reachable through the connection the play used, and the hostname is the described one
    hostname = subprocess.run(
        ["lxc-attach", "-n", LXC_NAME, "--", "cat", "/etc/hostname"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()
    assert hostname == "lifecycle-ct801"
    assert api.token_value not in result.output


def test_04_second_run_changes_nothing(lab: tuple[Cluster, ApiHandle, Path]) -> None:
    cluster, api, base = lab
    before, offset = ct_conf(cluster), log_size(cluster)
    result = play(cluster, api, base)
    assert result.rc == 0, result.output
    assert result.count(HOST, "changed") == 0, result.output
    assert ct_conf(cluster) == before
    assert [r for r in requests_since(cluster, offset) if r[0] != "GET"] == []


def test_05_cores_and_memory_change_online(lab: tuple[Cluster, ApiHandle, Path]) -> None:
    cluster, api, base = lab
    state, pid = lxc_state()
    before, offset = ct_conf(cluster), log_size(cluster)
    plan = play(
        cluster, api, base, "--check", "--diff", pve_container_cores=2, pve_container_memory=768
    )
    assert plan.rc == 0, plan.output
    assert '+    "cores": 2,' in plan.output
    assert ct_conf(cluster) == before
    assert [r for r in requests_since(cluster, offset) if r[0] != "GET"] == []
    result = play(cluster, api, base, "--diff", pve_container_cores=2, pve_container_memory=768)
    assert result.rc == 0, result.output
    assert result.count(HOST, "changed") >= 1
    assert '-    "memory": 512,' in result.output
    assert '+    "memory": 768,' in result.output
    conf = ct_conf(cluster).splitlines()
    assert "cores: 2" in conf
    assert "memory: 768" in conf
    assert lxc_state() == (state, pid)  # same init process: applied without a restart
    writes = [(m, p) for m, p, _ in requests_since(cluster, offset) if m != "GET"]
    assert writes == [("PUT", f"/nodes/{NODE}/lxc/{VMID}/config")]


def test_06_rootfs_shrink_is_refused(lab: tuple[Cluster, ApiHandle, Path]) -> None:
    cluster, api, base = lab
    before, offset = ct_conf(cluster), log_size(cluster)
    result = play(
        cluster,
        api,
        base,
        pve_container_cores=2,
        pve_container_memory=768,
        pve_container_rootfs_size=2,
    )
    assert result.rc != 0
    assert "refusing to shrink the root filesystem of CT 801 from 4 GiB to 2 GiB" in result.output
    assert "pve_container_rootfs_size >= 4" in result.output
    assert ct_conf(cluster) == before
    assert [r for r in requests_since(cluster, offset) if r[0] != "GET"] == []


def test_07_rootfs_growth_is_online(lab: tuple[Cluster, ApiHandle, Path]) -> None:
    cluster, api, base = lab
    pid = lxc_state()[1]
    result = play(
        cluster,
        api,
        base,
        pve_container_cores=2,
        pve_container_memory=768,
        pve_container_rootfs_size=6,
    )
    assert result.rc == 0, result.output
    assert re.search(
        r"^rootfs: local:801/subvol-801-disk-0\.subvol,size=6G$", ct_conf(cluster), re.M
    )
    assert lxc_state() == ("RUNNING", pid)


def test_08_disruptive_change_is_reported_not_applied(lab: tuple[Cluster, ApiHandle, Path]) -> None:
    cluster, api, base = lab
    before = ct_conf(cluster)
    common = {"pve_container_cores": 2, "pve_container_memory": 768, "pve_container_rootfs_size": 6}
    result = play(cluster, api, base, pve_container_hostname="lifecycle-renamed", **common)
    assert result.rc == 0, result.output
    assert result.count(HOST, "changed") == 0
    assert (
        "pve_container_hostname (hostname): live lifecycle-ct801, described lifecycle-renamed"
        in result.output
    )
    assert "needs a restart" in result.output
    assert ct_conf(cluster) == before
    # with the flag: written, and the running container is rebooted so it takes effect
    pid = lxc_state()[1]
    result = play(
        cluster,
        api,
        base,
        pve_container_hostname="lifecycle-renamed",
        pve_container_allow_disruptive=True,
        **common,
    )
    assert result.rc == 0, result.output
    assert "hostname: lifecycle-renamed" in ct_conf(cluster).splitlines()
    state, new_pid = lxc_state()
    assert state == "RUNNING"
    assert new_pid != pid


def test_09_rootfs_storage_move_needs_the_flag(lab: tuple[Cluster, ApiHandle, Path]) -> None:
    cluster, api, base = lab
    common = {
        "pve_container_cores": 2,
        "pve_container_memory": 768,
        "pve_container_rootfs_size": 6,
        "pve_container_hostname": "lifecycle-renamed",
        "pve_container_rootfs_storage": FAST,
    }
    before = ct_conf(cluster)
    result = play(cluster, api, base, **common)
    assert result.rc == 0, result.output
    assert result.count(HOST, "changed") == 0
    assert "needs a rebuild" in result.output
    assert ct_conf(cluster) == before
    result = play(cluster, api, base, pve_container_allow_disruptive=True, **common)
    assert result.rc == 0, result.output
    conf = ct_conf(cluster)
    assert re.search(rf"^rootfs: {FAST}:801/subvol-801-disk-0\.subvol,size=6G$", conf, re.M), conf
    assert "hostname: lifecycle-renamed" in conf.splitlines()
    node = cluster.node(NODE)
    assert (
        node.host_path(FAST_PATH) / "images/801/subvol-801-disk-0.subvol/etc/hostname"
    ).is_file()
    assert not (node.host_path("/var/lib/vz") / "images/801").exists()
    assert list(node.host_path("/var/lib/vz/dump").glob("vzdump-lxc-801-*.tar.zst"))  # kept
    assert lxc_state()[0] == "RUNNING"
    again = play(cluster, api, base, **common)
    assert again.count(HOST, "changed") == 0, again.output


def test_99_every_request_was_a_declared_schema_valid_call(
    lab: tuple[Cluster, ApiHandle, Path],
) -> None:
    cluster, _, _ = lab
    seen = requests_since(cluster, 0)
    assert len(seen) > 20
    declared = {(m, t) for m, t, _ in [*module.API_CALLS, *COMMUNITY_PROXMOX_CALLS]}
    for method, path, status in seen:
        # the stand-in checks every parameter against the PVE 9.1 schema first: 400/501
        # would mean a call PVE refuses
        assert status not in (400, 501), (method, path, status)
        try:
            endpoint = find_endpoint(method, path.split("?", 1)[0])
        except ApiError as exc:  # pragma: no cover - shown on failure
            pytest.fail(f"{method} {path}: {exc}")
        assert (method, endpoint.template) in declared, (method, endpoint.template)
    templates = {(m, find_endpoint(m, p.split("?", 1)[0]).template) for m, p, _ in seen}
    assert ("POST", "/nodes/{node}/lxc") in templates  # community.proxmox's create
    assert ("PUT", "/nodes/{node}/lxc/{vmid}/config") in templates  # our online change
