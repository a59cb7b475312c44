"""The REST stand-in through proxmoxer: each call the project makes, and PVE's refusals."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import requests
from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException

from specops_lab.pve.layout import Cluster
from specops_lab.pve.testing import TEMPLATE_NAME, ApiHandle
from specops_lab.pve_schema import check_returns

pytestmark = pytest.mark.lxc

VM_CONF = """\
#3090 pair for the training VM
boot: order=scsi0
cores: 8
hostpci0: host=0000:41:00,pcie=1
hostpci1: mapping=rtx3090-b
machine: q35
memory: 32768
name: trainer
scsi0: local:200/vm-200-disk-0.raw,size=64G
"""

PCI_CFG = """\
rtx3090-b
\tmap id=10de:2204,iommugroup=40,node=pvetest-a,path=0000:42:00.0,subsystem-id=10de:1454
\tdescription second 3090
"""


@pytest.fixture(scope="module")
def prox(pve_api: ApiHandle, api_cluster: Cluster) -> ProxmoxAPI:
    node = api_cluster.node("pvetest-a")
    node.vm_conf(200).write_text(VM_CONF)
    node.pci_mapping_cfg.write_text(PCI_CFG)
    os.mknod(node.host_path("/dev/nvidia0"), 0o020666, os.makedev(195, 0))
    return ProxmoxAPI(
        pve_api.host,
        port=pve_api.port,
        user=pve_api.user,
        token_name=pve_api.token_name,
        token_value=pve_api.token_value,
        verify_ssl=str(pve_api.cert),
        timeout=60,
    )


def _checked(method: str, path: str, data: Any) -> Any:
    problems = check_returns(method, path, data)
    assert problems == [], problems
    return data


def _wait(prox: ProxmoxAPI, node: str, upid: str, timeout: float = 120) -> dict[str, Any]:
    assert upid.startswith(f"UPID:{node}:")
    fields = upid.split(":")
    assert len(fields) == 9
    assert fields[8] == ""
    assert all(int(f, 16) >= 0 for f in fields[2:5])  # pid, pstart, starttime in hex
    assert fields[7] == "root@pam!specops"  # the token that started it, as on PVE
    deadline = time.monotonic() + timeout
    while True:
        status = prox.nodes(node).tasks(upid).status.get()
        _checked("GET", f"/nodes/{node}/tasks/{upid}/status", status)
        if status["status"] == "stopped":
            return dict(status)
        assert time.monotonic() < deadline, f"task {upid} still running"
        time.sleep(0.2)


def _task_log(prox: ProxmoxAPI, node: str, upid: str) -> str:
    log = prox.nodes(node).tasks(upid).log.get(limit=0)
    _checked("GET", f"/nodes/{node}/tasks/{upid}/log", log)
    return "\n".join(line["t"] for line in log)


def test_cluster_and_node_reads(prox: ProxmoxAPI) -> None:
    version = _checked("GET", "/version", prox.version.get())
    assert version["release"] == "9.1"
    nodes = _checked("GET", "/nodes", prox.nodes.get())
    assert sorted(n["node"] for n in nodes) == ["pvetest-a", "pvetest-b"]
    _checked("GET", "/nodes/pvetest-a/status", prox.nodes("pvetest-a").status.get())
    status = _checked("GET", "/cluster/status", prox.cluster.status.get())
    assert {s["type"] for s in status} == {"cluster", "node"}
    storage = _checked("GET", "/nodes/pvetest-a/storage", prox.nodes("pvetest-a").storage.get())
    assert [s["storage"] for s in storage] == ["local"]
    assert "rootdir" in storage[0]["content"]


def test_storage_content_lists_templates(prox: ProxmoxAPI) -> None:
    """What community.proxmox's template check reads before it creates a container."""
    path = "/nodes/pvetest-a/storage/local/content"
    content = _checked("GET", path, prox.nodes("pvetest-a").storage("local").content.get())
    templates = [c for c in content if c["content"] == "vztmpl"]
    assert [(t["volid"], t["format"]) for t in templates] == [
        (f"local:vztmpl/{TEMPLATE_NAME}", "tar")
    ]
    assert templates[0]["size"] > 1_000_000
    only = prox.nodes("pvetest-a").storage("local").content.get(content="backup")
    assert all(c["content"] == "backup" for c in _checked("GET", path, only))
    err = _error(prox.nodes("pvetest-a").storage("nope").content.get)
    assert "storage 'nope' does not exist" in str(err.content)


def test_vms_holding_pci_devices(prox: ProxmoxAPI) -> None:
    vms = _checked("GET", "/nodes/pvetest-a/qemu", prox.nodes("pvetest-a").qemu.get())
    assert [(v["vmid"], v["status"]) for v in vms] == [(200, "stopped")]
    config = prox.nodes("pvetest-a").qemu(200).config.get()
    assert config["hostpci0"] == "host=0000:41:00,pcie=1"
    assert config["hostpci1"] == "mapping=rtx3090-b"
    # qemu-server parse_vm_config trims the description's trailing whitespace
    assert config["description"] == "3090 pair for the training VM"
    mapping = _checked("GET", "/cluster/mapping/pci", prox.cluster.mapping.pci.get())
    assert mapping[0]["id"] == "rtx3090-b"
    assert mapping[0]["map"][0].startswith("id=10de:2204,")
    # A running flag flips what status/current and cluster/resources report.
    current = prox.nodes("pvetest-a").qemu(200).status.current.get()
    _checked("GET", "/nodes/pvetest-a/qemu/200/status/current", current)
    assert current["status"] == "stopped"
    resources = _checked("GET", "/cluster/resources", prox.cluster.resources.get(type="vm"))
    assert {"id": "qemu/200", "node": "pvetest-a"}.items() <= resources[0].items()


def test_container_lifecycle_and_migration(prox: ProxmoxAPI, api_cluster: Cluster) -> None:
    a = prox.nodes("pvetest-a")
    upid = a.lxc.post(
        vmid=300,
        ostemplate=f"local:vztmpl/{TEMPLATE_NAME}",
        hostname="llm1",
        storage="local",
        memory=1024,
    )
    assert _wait(prox, "pvetest-a", upid)["exitstatus"] == "OK"
    cts = _checked("GET", "/nodes/pvetest-a/lxc", a.lxc.get())
    assert [(c["vmid"], c["status"], c["name"]) for c in cts] == [(300, "stopped", "llm1")]

    # Raw lxc.* lines are root's, in the file; GET shows them as pairs.
    conf_path = api_cluster.node("pvetest-a").ct_conf(300)
    conf_path.write_text(
        conf_path.read_text() + "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "\n[snap1]\narch: amd64\nmemory: 256\n"
    )
    snapshot = conf_path.read_text().split("[snap1]")[1]
    a.lxc(300).config.put(dev0="/dev/nvidia0,mode=0666", delete="swap", cores=2)
    config = _checked("GET", "/nodes/pvetest-a/lxc/300/config", a.lxc(300).config.get())
    assert config["dev0"] == "/dev/nvidia0,mode=0666"
    assert config["cores"] == 2
    assert config["memory"] == 1024
    assert "swap" not in config
    assert config["lxc"] == [["lxc.cgroup2.devices.allow", "c 195:* rwm"]]
    assert a.lxc(300).config.get(snapshot="snap1")["memory"] == 256
    assert conf_path.read_text().split("[snap1]")[1] == snapshot

    # Resize grows the recorded size (absolute or +N) and refuses to shrink, as PVE does.
    for size, want in (("+2G", "size=2G"), ("3G", "size=3G")):
        upid = a.lxc(300).resize.put(disk="rootfs", size=size)
        assert _wait(prox, "pvetest-a", upid)["exitstatus"] == "OK"
        assert a.lxc(300).config.get()["rootfs"].endswith(want)
    upid = a.lxc(300).resize.put(disk="rootfs", size="1G")
    assert _wait(prox, "pvetest-a", upid)["exitstatus"] == "unable to shrink disk size"
    assert a.lxc(300).config.get()["rootfs"].endswith("size=3G")
    assert conf_path.read_text().split("[snap1]")[1] == snapshot

    for action, want in (
        ("start", "running"),
        ("reboot", "running"),
        ("shutdown", "stopped"),
        ("start", "running"),
        ("stop", "stopped"),
    ):
        upid = getattr(a.lxc(300).status, action).post()
        status = _wait(prox, "pvetest-a", upid)
        assert status["exitstatus"] == "OK", _task_log(prox, "pvetest-a", upid)
        current = a.lxc(300).status.current.get()
        _checked("GET", "/nodes/pvetest-a/lxc/300/status/current", current)
        assert current["status"] == want, action
    assert conf_path.read_text().split("[snap1]")[1] == snapshot

    # Running CT: migration needs restart mode, as on PVE.
    _wait(prox, "pvetest-a", a.lxc(300).status.start.post())
    err = _error(a.lxc(300).status.start.post)
    assert (err.status_code, err.content) == (500, "CT 300 already running")
    with pytest.raises(ResourceException) as exc:
        a.lxc(300).migrate.post(target="pvetest-b")
    assert "can't migrate running container without --online or --restart" in str(exc.value)

    # The target has no /dev/nvidia0: the move happens, the start there fails (PVE
    # leaves the CT on the target, stopped, and the task fails with "migration problems").
    upid = a.lxc(300).migrate.post(target="pvetest-b", restart=1, timeout=30)
    status = _wait(prox, "pvetest-a", upid)
    assert status["exitstatus"] == "migration problems"
    assert "Device /dev/nvidia0 does not exist" in _task_log(prox, "pvetest-a", upid)
    b = prox.nodes("pvetest-b")
    assert b.lxc(300).status.current.get()["status"] == "stopped"
    assert a.lxc.get() == []

    # Make the device on B, migrate B -> A -> B (stopped, then restart mode).
    node_b = api_cluster.node("pvetest-b")
    os.mknod(node_b.host_path("/dev/nvidia0"), 0o020666, os.makedev(195, 0))
    assert (
        _wait(prox, "pvetest-b", b.lxc(300).migrate.post(target="pvetest-a"))["exitstatus"] == "OK"
    )
    _wait(prox, "pvetest-a", a.lxc(300).status.start.post())
    upid = a.lxc(300).migrate.post(target="pvetest-b", restart=1, timeout=30)
    assert _wait(prox, "pvetest-a", upid)["exitstatus"] == "OK", _task_log(prox, "pvetest-a", upid)
    assert b.lxc(300).status.current.get()["status"] == "running"
    assert node_b.ct_conf(300).read_text().split("[snap1]")[1] == snapshot
    resources = prox.cluster.resources.get(type="vm")
    assert {(r["id"], r["node"], r["status"]) for r in resources} >= {
        ("lxc/300", "pvetest-b", "running")
    }

    assert _wait(prox, "pvetest-b", b.lxc(300).delete(force=1))["exitstatus"] == "OK"
    assert b.lxc.get() == []


def _error(call: Any) -> ResourceException:
    with pytest.raises(ResourceException) as exc:
        call()
    return exc.value


def test_bad_parameters_rejected_like_pve(prox: ProxmoxAPI) -> None:
    err = _error(lambda: prox.nodes("pvetest-a").qemu(200).config.get(foo=1))
    assert err.status_code == 400
    assert err.errors == {
        "foo": "property is not defined in schema and the schema does not "
        "allow additional properties"
    }
    # Raw LXC keys are not API parameters (only root may write them, in the file).
    err = _error(
        lambda: (
            prox.nodes("pvetest-a")
            .lxc(200)
            .config.put(**{"lxc.cgroup2.devices.allow": "c 195:* rwm"})
        )
    )
    assert err.status_code == 400
    assert list(err.errors) == ["lxc.cgroup2.devices.allow"]
    err = _error(
        lambda: prox.nodes("pvetest-a").lxc(300).migrate.post(target="pvetest-b", restart="maybe")
    )
    assert err.errors == {"restart": "type check ('boolean') failed - got 'maybe'"}
    err = _error(prox.nodes("pvetest-a").lxc(42).status.current.get)
    # check_prop checks the format (pve-vmid) before minimum
    assert err.errors == {"vmid": "invalid format - value does not look like a valid VM ID\n"}
    err = _error(prox.nodes("pvetest-a").lxc(300).migrate.post)
    assert err.errors == {"target": "property is missing and it is not optional"}
    err = _error(lambda: prox.cluster.resources.get(type="ct"))
    assert err.errors == {
        "type": "value 'ct' does not have a value in the enumeration 'vm, storage, node, sdn'"
    }


def test_unknown_paths_and_auth(prox: ProxmoxAPI, pve_api: ApiHandle) -> None:
    err = _error(prox.nodes("pvetest-a").lxc(300).frobnicate.get)
    assert err.status_code == 501
    assert err.content == "Method 'GET /nodes/pvetest-a/lxc/300/frobnicate' not implemented"
    err = _error(prox.version.post)
    assert err.status_code == 501
    url = f"{pve_api.url}/version"
    no_auth = requests.get(url, verify=str(pve_api.cert), timeout=10)
    assert no_auth.status_code == 401
    assert no_auth.reason == "No ticket"
    outside = requests.get(
        f"https://{pve_api.host}:{pve_api.port}/index.html",
        verify=str(pve_api.cert),
        timeout=10,
        headers={"Authorization": pve_api.auth_header},
    )
    assert (outside.status_code, outside.reason) == (501, "no such uri")
    wrong = requests.get(
        url,
        verify=str(pve_api.cert),
        timeout=10,
        headers={
            "Authorization": f"PVEAPIToken={pve_api.user}!{pve_api.token_name}=not-the-secret"
        },
    )
    assert (wrong.status_code, wrong.reason, wrong.content) == (401, "Authentication failed!", b"")
    assert pve_api.token_value not in wrong.text
    ok = requests.get(
        url, verify=str(pve_api.cert), timeout=10, headers={"Authorization": pve_api.auth_header}
    )
    assert ok.status_code == 200
    assert ok.json()["data"]["version"].startswith("9.1")


def test_vzdump_then_restore_on_another_host(prox: ProxmoxAPI, api_cluster: Cluster) -> None:
    a, b = prox.nodes("pvetest-a"), prox.nodes("pvetest-b")
    node_a, node_b = api_cluster.node("pvetest-a"), api_cluster.node("pvetest-b")
    upid = a.lxc.post(vmid=310, ostemplate=f"local:vztmpl/{TEMPLATE_NAME}", hostname="bk")
    assert _wait(prox, "pvetest-a", upid)["exitstatus"] == "OK"
    rootfs = node_a.volume_path("local:310/subvol-310-disk-0.subvol")
    (rootfs / "root" / "marker").write_text("keep me\n")
    conf = node_a.ct_conf(310)
    conf.write_text(
        conf.read_text() + "lxc.cgroup2.devices.allow: c 195:* rwm\n\n[s1]\nmemory: 1\n"
    )

    upid = a.vzdump.post(vmid="310", storage="local", compress="zstd", mode="stop")
    status = _wait(prox, "pvetest-a", upid)
    assert status["exitstatus"] == "OK", _task_log(prox, "pvetest-a", upid)
    backups = sorted(node_a.host_path("/var/lib/vz/dump").glob("vzdump-lxc-310-*.tar.zst"))
    assert len(backups) == 1

    # Another host (not the same cluster in real life): the operator copies the archive.
    (node_b.host_path("/var/lib/vz/dump") / backups[0].name).write_bytes(backups[0].read_bytes())
    upid = b.lxc.post(
        vmid=311, ostemplate=f"local:backup/{backups[0].name}", restore=1, hostname="restored"
    )
    status = _wait(prox, "pvetest-b", upid)
    assert status["exitstatus"] == "OK", _task_log(prox, "pvetest-b", upid)
    assert status["type"] == "vzrestore"
    config = b.lxc(311).config.get()
    assert config["hostname"] == "restored"
    assert config["rootfs"].startswith("local:311/subvol-311-disk-0.subvol")
    assert config["lxc"] == [["lxc.cgroup2.devices.allow", "c 195:* rwm"]]
    assert "[s1]" not in node_b.ct_conf(311).read_text()  # backups carry no snapshots
    restored = node_b.volume_path("local:311/subvol-311-disk-0.subvol")
    assert (restored / "root" / "marker").read_text() == "keep me\n"
    assert not (restored / "etc" / "vzdump").exists()

    err = _error(
        lambda: b.lxc.post(vmid=311, ostemplate=f"local:backup/{backups[0].name}", restore=1)
    )
    assert err.status_code == 500
    assert err.content == "unable to restore CT 311 - CT 311 already exists on node 'pvetest-b'"
