"""Source gone (issue 22): the preflight's mode and why, the restore from the latest
backup, and the re-create decision, against the PVE API stand-in (schema-checked,
token-authenticated) and the lab's node trees (tests/fixtures/hosts/lab-converged). No
LXC: the stand-in's vzdump and restore are tar archives of the CT's rootfs directory,
and nothing here starts the container (tests/deploy/test_deploy_lab.py does, end to end).

pve-b holds CT 701 and is then destroyed: removed from the cluster (cluster.json), as
after ``pvecm delnode``; its backup stays on a storage both nodes mount (``backup``,
shared, an NFS export on real hosts: here each node's /mnt/backup links one directory).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specops.migrate.client import PveClient
from specops.migrate.move import move
from specops.migrate.preflight import gather_local_facts, preflight
from specops.migrate.report import render_markdown, summarize
from specops.migrate.spec import MigrationSpec, parse_spec
from specops.migrate.state import load_state
from specops_lab.hosttree import build_tree, load_spec
from specops_lab.pve.layout import Cluster
from specops_lab.pve.testing import ApiHandle, make_test_cluster, running_api

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VMID = 701
BACKUP = "dir: backup\n\tpath /mnt/backup\n\tcontent backup\n\tshared 1\n"
CONF = (
    "arch: amd64\nhostname: gone-test\nmemory: 512\nostype: debian\n"
    f"rootfs: local:{VMID}/subvol-{VMID}-disk-0.subvol,size=1G\n"
    "mp0: /srv/models,mp=/srv/models,shared=1\n"
    "mp1: /var/lib/scratch,mp=/scratch\n"
    "lxc.cgroup2.devices.allow: c 195:* rwm\n"
    "lxc.cgroup2.devices.allow: c 511:* rwm\n"
    "lxc.mount.entry: /dev/nvidia2 dev/nvidia2 none bind,optional,create=file\n"
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, ApiHandle, Path]]:
    base = tmp_path_factory.mktemp("gone")
    cluster = make_test_cluster(base, None, names=("pve-a", "pve-b"))
    shared = base / "shared-backup"
    (shared / "dump").mkdir(parents=True)
    for name in ("pve-a", "pve-b"):
        node = cluster.node(name)
        build_tree(
            load_spec(REPO / f"tests/fixtures/hosts/lab-converged/{name}.yml"),
            node.root,
            device_nodes=False,
        )
        node.storage_cfg.write_text(node.storage_cfg.read_text() + BACKUP)
        node.host_path("/mnt").mkdir(parents=True, exist_ok=True)
        node.host_path("/mnt/backup").symlink_to(shared)
    b = cluster.node("pve-b")
    b.ct_conf(VMID).write_text(CONF)
    rootfs = b.volume_path(f"local:{VMID}/subvol-{VMID}-disk-0.subvol")
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "hostname").write_text("gone-test\n")
    with running_api(cluster.dir) as api:
        yield cluster, api, base


def _spec(api: ApiHandle, base: Path, **extra: Any) -> MigrationSpec:
    data: dict[str, Any] = {
        "vmid": VMID,
        "source": "pve-b",
        "target": "pve-a",
        "gpu_model": "NVIDIA RTX A6000",
        "gpu_count": 1,
        "state_dir": str(base / "state"),
        "api": {
            "host": api.host,
            "port": api.port,
            "token_name": api.token_name,
            "token_secret_env": "SPECOPS_GONE_TEST_SECRET",
            "verify": str(api.cert),
        },
    }
    data.update(extra)
    return parse_spec(data)


def _mode(result: Any) -> str:
    return str(next(c.message for c in result.checks if c.name == "mode"))


def _destroy_node(cluster: Cluster, name: str) -> None:
    """The node is gone: out of the cluster, its local disks with it."""
    data = json.loads(cluster.file.read_text())
    data["nodes"] = [n for n in data["nodes"] if n["name"] != name]
    cluster.file.write_text(json.dumps(data))
    node = cluster.node(name)
    for path in sorted(node.host_path("/var/lib/vz/images").rglob("*"), reverse=True):
        if path.is_file():
            path.unlink()


def test_source_gone_restores_the_latest_backup_else_recreates(
    lab: tuple[Cluster, ApiHandle, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, api, base = lab
    monkeypatch.setenv("SPECOPS_GONE_TEST_SECRET", api.token_value)
    spec = _spec(api, base, inventory_host="ct701")
    client = PveClient(spec.api)
    facts = gather_local_facts(str(cluster.node("pve-a").root))

    # The source is up: a normal move, and the preflight says so (mp1, local to pve-b,
    # would be removed before the move and re-added after it).
    normal = preflight(_spec(api, base, recreate_mounts=["mp1"]), client, facts)
    assert normal.ok, normal.failures()
    assert normal.recovery == ""
    assert _mode(normal).startswith("normal: pve-b is online in the cluster")

    # Two backups on the shared storage (the newest is restored), then pve-b dies.
    archives = []
    for _ in range(2):
        upid = client.call(
            "POST", "/nodes/{node}/vzdump", {"node": "pve-b"}, vmid=str(VMID), storage="backup"
        )
        res = client.wait_task("pve-b", str(upid), timeout=120, want_log=True)
        assert res.ok, res.log
        archives.append(next(line for line in res.log if "creating vzdump archive" in line))
    newest = archives[-1].split("'")[1].rsplit("/", 1)[-1]
    _destroy_node(cluster, "pve-b")

    gone = preflight(spec, client, facts)
    assert gone.ok, gone.failures()
    assert gone.recovery == "restore"
    assert gone.archive == f"backup:backup/{newest}"
    assert _mode(gone).startswith(
        "restore: pve-b is not a node of the cluster any more (nodes: pve-a); the latest "
        f"backup of CT {VMID} that pve-a sees is backup:backup/{newest}"
    )
    assert gone.gpus == ["0000:01:00.0"]  # the target's facts, as in a normal move
    assert "restored on pve-a from backup:backup/" in gone.plan()

    state = load_state(Path(spec.state_dir), VMID)
    with state.timed("preflight") as entry:  # as `specops migrate preflight` records it
        entry.update(gone.to_dict())
    outcome = move(spec, client, state, gone)
    assert outcome.action == "restored"
    assert client.where_is(VMID) == ("pve-a", "stopped")
    restored = cluster.node("pve-a").volume_path(f"local:{VMID}/subvol-{VMID}-disk-0.subvol")
    assert (restored / "etc" / "hostname").read_text() == "gone-test\n"
    # The backup's GPU lines are the dead source's: recorded for the GPU phase's clean-up.
    assert "lxc.cgroup2.devices.allow: c 511:* rwm" in state.phase("move")["source_gpu_lines"]
    assert outcome.notes == [
        "mp1 (/var/lib/scratch,mp=/scratch): a local bind mount of pve-b, not in the backup"
    ]
    summary = summarize(load_state(Path(spec.state_dir), VMID), [], facts)
    assert summary["recovery"] == "restore"
    text = render_markdown(summary)
    assert "Not carried over:\n- what CT 701 wrote after its backup of" in text
    assert "- mp1 (/var/lib/scratch,mp=/scratch): a local bind mount of pve-b" in text
    print(text)

    # A re-run: the CT is on the target, nothing is restored again.
    again = preflight(spec, client, facts)
    assert again.ok, again.failures()
    assert again.already_on_target
    assert move(spec, client, load_state(Path(spec.state_dir), VMID), again).action == "skipped"

    # No backup the target sees: re-create from the inventory, or a clear failure.
    (cluster.node("pve-a").ct_conf(VMID)).unlink()
    for archive in (base / "shared-backup" / "dump").iterdir():
        archive.unlink()
    recreate = preflight(spec, client, facts)
    assert recreate.ok, recreate.failures()
    assert recreate.recovery == "recreate"
    assert _mode(recreate).startswith(
        "re-create: pve-b is not a node of the cluster any more (nodes: pve-a); no backup "
        f"of CT {VMID} on a storage pve-a sees (searched: local, backup): CT {VMID} is "
        "re-created on pve-a from the inventory (ct701"
    )
    assert any("root disk on pve-b" in item for item in recreate.lost)
    nothing = preflight(_spec(api, base), client, facts)
    assert not nothing.ok
    assert "no migrate_ct_host to re-create it from" in " ".join(nothing.failures())
    only_backup = preflight(
        _spec(api, base, recovery="backup", inventory_host="ct701"), client, facts
    )
    assert "migrate_source_gone_recovery is 'backup' but no backup" in " ".join(
        only_backup.failures()
    )
