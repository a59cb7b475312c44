"""playbooks/migrate.yml against the lab: two stand-in PVE hosts over real LXC.

CT 701 serves on pve-b (4x RTX PRO 6000, driver loaded, nvidia-uvm major 511) with raw
GPU lines for two cards; it moves to pve-a (2x RTX A6000 on vfio-pci, no driver,
nvidia-uvm major 508, 2x RTX 3090 held by running VMs). The host roles (nvidia_driver,
vfio_release) have their own molecule scenarios and install packages, so here their
effect on pve-a is the lab host tree rebuilt with the driver loaded and the two A6000s
bound to nvidia (tag migrate_target_host is skipped). Everything else is the real
playbook, the real API stand-in (schema-checked calls) and real LXC.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from migrate_lab import REPO, MigrateLab

from specops.migrate.client import PveClient
from specops.migrate.spec import ApiEndpoint
from specops_lab.hosttree import build_tree, load_spec, with_cards_released, with_nvidia_loaded
from specops_lab.pve.testing import open_devices_in_ct

pytestmark = [pytest.mark.lxc, pytest.mark.slow]

VMID = 701
SOURCE_GPU_LINES = (
    "lxc.cgroup2.devices.allow: c 195:* rwm\n"
    "lxc.cgroup2.devices.allow: c 511:* rwm\n"
    "lxc.mount.entry: /dev/nvidia2 dev/nvidia2 none bind,optional,create=file\n"
    "lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file\n"
    "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file\n"
    "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
    "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file\n"
)


def _client(lab: MigrateLab) -> PveClient:
    endpoint = ApiEndpoint(
        host="127.0.0.1",
        port=lab.port,
        token_secret_file=str(lab.paths.token_secret_file),
        token_secret_env="SPECOPS_MIGRATE_TEST_UNSET",  # noqa: S106  (a variable name)
        verify=str(lab.cert),
    )
    return PveClient(endpoint)


def _open_in_ct(lab: MigrateLab, node: str, *paths: str) -> dict[str, str]:
    return open_devices_in_ct(lab.cluster.node(node), VMID, *paths)


def _inventory(lab: MigrateLab, tmp: Path, **migrate: object) -> Path:
    inv = tmp / "inventory"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "pve_nodes": {"hosts": {"pve-a": None, "pve-b": None}},
                        "serving": {"hosts": {}},
                    }
                }
            }
        )
    )
    (inv / "group_vars" / "pve_nodes.yml").write_text(
        yaml.safe_dump(
            {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "specops_host_root": str(lab.paths.lab_dir) + "/{{ inventory_hostname }}",
                "lxc_gpu_passthrough_host_root": "{{ specops_host_root }}",
                "lxc_gpu_passthrough_pct_command": [
                    str(REPO / "scripts/lab/pct"),
                    "--node-root",
                    "{{ specops_host_root }}",
                ],
            }
        )
    )
    settings = {
        "migrate_vmid": VMID,
        "migrate_source": "pve-b",
        "migrate_target": "pve-a",
        "migrate_gpu_model": "NVIDIA RTX A6000",
        "migrate_gpu_count": 2,
        "migrate_api_host": "127.0.0.1",
        "migrate_api_port": lab.port,
        "migrate_api_ca_file": str(lab.cert),
        "migrate_api_token_secret_file": str(lab.paths.token_secret_file),
        "migrate_state_dir": str(tmp / "state"),
    }
    settings.update(migrate)
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(settings))
    return inv


def _playbook(inv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PROXMOX_TOKEN_SECRET", None)  # the secret comes from the lab's file
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env["SPECOPS_PYTHON"] = sys.executable
    env["ANSIBLE_FORCE_COLOR"] = "0"
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inv),
            "playbooks/migrate.yml",
            "--skip-tags",
            "migrate_target_host",
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _snapshot(lab: MigrateLab) -> dict[str, bytes | list[str]]:
    """Every PVE conf and task log of both nodes (a write through the API changes one)."""
    snap: dict[str, bytes | list[str]] = {}
    for node in lab.cluster.nodes.values():
        for conf in sorted(node.host_path("/etc/pve").rglob("*.conf")):
            snap[str(conf)] = conf.read_bytes()
        snap[f"{node.name}:tasks"] = sorted(str(p) for p in node.task_dir.rglob("*") if p.is_file())
    return snap


@pytest.fixture(scope="module")
def source_ct(migrate_lab: MigrateLab) -> int:
    """CT 701 running on pve-b with the GPU lines it was deployed with there."""
    api = _client(migrate_lab)
    upid = api.call(
        "POST",
        "/nodes/{node}/lxc",
        {"node": "pve-b"},
        vmid=VMID,
        ostemplate="local:vztmpl/debian-bookworm-rootfs.tar",
        hostname="migrate-701",
        storage="local",
        rootfs="local:1",
    )
    assert api.wait_task("pve-b", str(upid), timeout=300).ok
    conf = migrate_lab.cluster.node("pve-b").ct_conf(VMID)
    conf.write_text(conf.read_text() + SOURCE_GPU_LINES)
    upid = api.call(
        "POST", "/nodes/{node}/lxc/{vmid}/status/start", {"node": "pve-b", "vmid": VMID}
    )
    assert api.wait_task("pve-b", str(upid), timeout=120).ok
    assert _open_in_ct(migrate_lab, "pve-b", "/dev/nvidia2", "/dev/nvidia-uvm") == {
        "/dev/nvidia2": "ENXIO",
        "/dev/nvidia-uvm": "ENXIO",
    }
    return VMID


def test_preflight_fails_without_free_cards_and_changes_nothing(
    migrate_lab: MigrateLab, source_ct: int, tmp_path: Path
) -> None:
    before = _snapshot(migrate_lab)
    result = _playbook(_inventory(migrate_lab, tmp_path, migrate_gpu_count=3))
    assert result.returncode != 0
    assert "gpus: pve-a has 2 free 'NVIDIA RTX A6000' card(s), 3 wanted" in result.stdout, (
        result.stdout[-3000:]
    )
    assert _snapshot(migrate_lab) == before  # no conf written, no task started
    assert _client(migrate_lab).where_is(VMID) == ("pve-b", "running")

    # The 3090s are held by running VMs (201 by host=, 202 by a mapping): not free.
    result = _playbook(
        _inventory(
            migrate_lab, tmp_path, migrate_gpu_model="NVIDIA GeForce RTX 3090", migrate_gpu_count=1
        )
    )
    assert result.returncode != 0
    assert "0000:41:00.0 held by running VM 201" in result.stdout
    assert "0000:42:00.0 held by running VM 202" in result.stdout
    assert _snapshot(migrate_lab) == before
    assert "Migrate - move" not in result.stdout


def test_failed_migrate_task_leaves_ct_running_on_source(
    migrate_lab: MigrateLab, source_ct: int, tmp_path: Path
) -> None:
    # A leftover volume of an earlier attempt on the target: PVE's migrate refuses it
    # after the shutdown, puts the volumes back and restarts the CT on the source.
    stale = migrate_lab.cluster.node("pve-a").host_path(
        f"/var/lib/vz/images/{VMID}/subvol-{VMID}-disk-0.subvol"
    )
    stale.mkdir(parents=True)
    try:
        result = _playbook(_inventory(migrate_lab, tmp_path))
    finally:
        stale.rmdir()
    assert result.returncode != 0
    assert "stays on pve-b (running)" in result.stdout
    assert "already exists on node 'pve-a'" in result.stdout  # the task log is reported
    assert _client(migrate_lab).where_is(VMID) == ("pve-b", "running")
    assert not migrate_lab.cluster.node("pve-a").ct_conf(VMID).exists()


def _host_roles_effect_on_pve_a(lab: MigrateLab) -> None:
    """What nvidia_driver + vfio_release leave on pve-a: driver loaded, both A6000s bound
    to nvidia with minors 0 and 1 (the roles' molecule scenarios prove the roles)."""
    spec = load_spec(REPO / "tests/fixtures/hosts/lab-converged/pve-a.yml")
    spec = with_cards_released(with_nvidia_loaded(spec), [c.address for c in spec.cards[:2]])
    build_tree(spec, lab.cluster.node("pve-a").root, replace_existing=True)


def test_interrupted_after_move_rerun_finishes(
    migrate_lab: MigrateLab, source_ct: int, tmp_path: Path
) -> None:
    inv = _inventory(migrate_lab, tmp_path, migrate_gpu_method="raw")
    # First run stops right after the move (as if interrupted there).
    first = _playbook(inv, "--tags", "migrate_move")
    assert first.returncode == 0, first.stdout[-3000:]
    assert "CT 701 moved pve-b -> pve-a" in first.stdout
    api = _client(migrate_lab)
    where = api.where_is(VMID)
    assert where is not None
    assert where[0] == "pve-a"
    conf = migrate_lab.cluster.node("pve-a").ct_conf(VMID)
    assert "c 511:* rwm" in conf.read_text()  # stale: pve-b's uvm major

    _host_roles_effect_on_pve_a(migrate_lab)
    second = _playbook(inv, "--skip-tags", "migrate_userspace,migrate_service,migrate_benchmark")
    assert second.returncode == 0, second.stdout[-4000:]
    assert "CT 701 is already on pve-a" in second.stdout
    assert "Move: CT 701 moved pve-b -> pve-a" in second.stdout  # the report keeps the move
    text = conf.read_text()
    assert "511:" not in text
    assert "/dev/nvidia2" not in text
    assert "/dev/nvidia3" not in text
    assert "508:" in text  # pve-a's nvidia-uvm major
    assert api.where_is(VMID) == ("pve-a", "running")
    seen = _open_in_ct(migrate_lab, "pve-a", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm")
    assert seen == {"/dev/nvidia0": "ENXIO", "/dev/nvidia1": "ENXIO", "/dev/nvidia-uvm": "ENXIO"}

    report = (tmp_path / "state" / f"migrate-{VMID}-report.md").read_text()
    for phase in ("preflight", "move", "gpu_config"):
        assert f"| {phase} |" in report
    assert "| uvm_major | 511 | 508 |" in report
    print(report)  # docs/operations/migrate.md's timings come from here (pytest -s)
