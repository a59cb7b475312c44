"""Backup/restore mode across two clusters (two API stand-ins), over real LXC.

The two nodes are in different clusters, so ``POST .../migrate`` cannot reach the
target: the inventory chooses ``mode: backup_restore``. The backup storage is shared
(an NFS export on real hosts; here the target's ``/mnt/backup`` is a symlink to the
source's, which is what a shared mount is to the two nodes).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from specops.migrate.client import PveClient
from specops.migrate.move import move
from specops.migrate.preflight import preflight
from specops.migrate.spec import parse_spec
from specops.migrate.state import load_state
from specops_lab.pve.layout import Cluster
from specops_lab.pve.testing import ApiHandle, make_test_cluster, running_api, stop_lab_containers

pytestmark = [pytest.mark.lxc, pytest.mark.slow]

VMID = 702
BACKUP = "dir: backup\n\tpath /mnt/backup\n\tcontent backup\n\tshared 1\n"


@pytest.fixture(scope="module")
def two_clusters(
    tmp_path_factory: pytest.TempPathFactory, rootfs_tarball: Path
) -> Iterator[tuple[Cluster, Cluster, ApiHandle, ApiHandle]]:
    base = tmp_path_factory.mktemp("migrate-br")
    src = make_test_cluster(base / "one", rootfs_tarball, names=("migrate-src",))
    dst = make_test_cluster(base / "two", rootfs_tarball, names=("migrate-dst",))
    s_node, d_node = src.node("migrate-src"), dst.node("migrate-dst")
    for node in (s_node, d_node):
        node.storage_cfg.write_text(node.storage_cfg.read_text() + BACKUP)
    (s_node.host_path("/mnt/backup") / "dump").mkdir(parents=True)
    d_node.host_path("/mnt").mkdir(parents=True, exist_ok=True)
    d_node.host_path("/mnt/backup").symlink_to(s_node.host_path("/mnt/backup"))
    with running_api(src.dir) as a, running_api(dst.dir) as b:
        try:
            yield src, dst, a, b
        finally:
            for cluster in (src, dst):
                stop_lab_containers(cluster)
                for node in cluster.nodes.values():
                    shutil.rmtree(node.lxcpath / node.lxc_name(VMID), ignore_errors=True)


def _endpoint(handle: ApiHandle, env: str) -> dict[str, object]:
    return {
        "host": handle.host,
        "port": handle.port,
        "token_name": handle.token_name,
        "token_secret_env": env,
        "verify": str(handle.cert),
    }


def test_backup_restore_to_another_cluster(
    two_clusters: tuple[Cluster, Cluster, ApiHandle, ApiHandle],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _src, dst, a, b = two_clusters
    monkeypatch.setenv("MIGRATE_TEST_SRC_SECRET", a.token_value)
    monkeypatch.setenv("MIGRATE_TEST_DST_SECRET", b.token_value)
    spec = parse_spec(
        {
            "vmid": VMID,
            "target": "migrate-dst",
            "mode": "backup_restore",
            "backup_storage": "backup",
            "api": _endpoint(a, "MIGRATE_TEST_SRC_SECRET"),
            "target_api": _endpoint(b, "MIGRATE_TEST_DST_SECRET"),
            "state_dir": str(tmp_path / "state"),
        }
    )
    client, tclient = PveClient(spec.api), PveClient(spec.target_api)  # type: ignore[arg-type]
    upid = client.call(
        "POST",
        "/nodes/{node}/lxc",
        {"node": "migrate-src"},
        vmid=VMID,
        ostemplate="local:vztmpl/debian-bookworm-rootfs.tar",
        hostname="migrate-702",
        rootfs="local:1",
    )
    assert client.wait_task("migrate-src", str(upid), timeout=300).ok
    upid = client.call(
        "POST", "/nodes/{node}/lxc/{vmid}/status/start", {"node": "migrate-src", "vmid": VMID}
    )
    assert client.wait_task("migrate-src", str(upid), timeout=120).ok

    pre = preflight(spec, client, None, target_client=tclient)
    assert pre.ok, pre.failures()
    # The same nodes in migrate mode: the preflight names the missing cluster link.
    spec_migrate = parse_spec(
        {"vmid": VMID, "target": "migrate-dst", "api": _endpoint(a, "MIGRATE_TEST_SRC_SECRET")}
    )
    bad = preflight(spec_migrate, client, None)
    assert (
        "target_node: migrate-dst is not a node of the cluster (nodes: migrate-src)"
        in bad.failures()
    )

    state = load_state(Path(spec.state_dir), VMID)
    outcome = move(spec, client, state, pre, target_client=tclient)
    assert outcome.action == "restored"
    assert tclient.where_is(VMID) == ("migrate-dst", "stopped")
    assert client.where_is(VMID) == ("migrate-src", "stopped")  # kept as the fallback, stopped
    upid = tclient.call(
        "POST", "/nodes/{node}/lxc/{vmid}/status/start", {"node": "migrate-dst", "vmid": VMID}
    )
    assert tclient.wait_task("migrate-dst", str(upid), timeout=120).ok
    name = dst.node("migrate-dst").lxc_name(VMID)
    proc = subprocess.run(
        ["lxc-attach", "-n", name, "-P", str(dst.node("migrate-dst").lxcpath), "--", "hostname"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.stdout.strip() == "migrate-702"
    # A re-run does not restore again.
    again = move(spec, client, load_state(Path(spec.state_dir), VMID), pre, target_client=tclient)
    assert again.action == "skipped"
