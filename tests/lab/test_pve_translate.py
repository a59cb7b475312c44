"""PVE conf -> LXC config translation and the schema checks, without starting anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specops.errors import ValidationError
from specops_lab.pve import migrate, pct
from specops_lab.pve.conf import parse_pct_config
from specops_lab.pve.layout import Cluster, Node, init_cluster, read_storage_cfg
from specops_lab.pve.lxcconf import StartError, build_lxc_config
from specops_lab.pve.testing import make_test_cluster
from specops_lab.pve_schema import ApiError, calls_in, check_call, find_endpoint

CONF = """\
#desc
arch: amd64
hostname: llm1
ostype: debian
rootfs: local:100/subvol-100-disk-0.subvol,size=8G
dev0: /dev/nvidia1,gid=44
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup.devices.allow: c 10:200 rwm
lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file
lxc.mount.entry: tmpfs tmp tmpfs rw 0 0

[old]
lxc.cgroup2.devices.allow: c 509:* rwm
dev5: /dev/gone
"""


@pytest.fixture
def node(tmp_path: Path) -> Node:
    node = Node(name="pvetest-x", root=tmp_path / "x", lxcpath=tmp_path / "lxc")
    init_cluster(tmp_path / "cluster", [node])
    os.mknod(node.host_path("/dev/nvidia1"), 0o020660, os.makedev(195, 1))
    return node


@pytest.fixture
def lxc_config_dir(tmp_path: Path) -> Path:
    """An LXC config dir with the Debian include (what lxc-templates / lxc-pve install)."""
    directory = tmp_path / "lxc-config"
    directory.mkdir()
    (directory / "common.conf").write_text("")
    (directory / "debian.common.conf").write_text("")
    return directory


def _plan(
    node: Node, machine: str, conf: str = CONF, config_dir: Path | None = None
) -> tuple[list[str], list[str]]:
    plan = build_lxc_config(
        parse_pct_config(100, conf),
        vmid=100,
        node=node,
        rootfs=Path("/r"),
        passthrough_dir=Path("/p"),
        machine_cgroup=machine,
        lxc_config_dir=config_dir or Path("/nonexistent"),
    )
    return plan.config.splitlines(), plan.warnings


def test_v2_host_on_this_v1_machine(node: Node, lxc_config_dir: Path) -> None:
    lines, warnings = _plan(node, "v1", config_dir=lxc_config_dir)
    root = node.root
    assert lines[:2] == [
        "lxc.arch = amd64",
        f"lxc.include = {lxc_config_dir}/debian.common.conf",
    ]
    # devN: the node's real major:minor, a bind of the passthrough node.
    assert "lxc.cgroup.devices.allow = c 195:1 rw" in lines
    assert "lxc.mount.entry = /p/dev/nvidia1 dev/nvidia1 none bind,create=file 0 0" in lines
    # Raw lines in order, v2 device key written as the key this machine enforces.
    raw = lines[lines.index("lxc.net.0.type = none") + 1 :]
    assert raw == [
        "lxc.cgroup.devices.allow = c 195:* rwm",
        f"lxc.mount.entry = {root}/dev/nvidia1 dev/nvidia1 none bind,optional,create=file",
        "lxc.mount.entry = tmpfs tmp tmpfs rw 0 0",
    ]
    assert warnings == [
        "lxc.cgroup.devices.allow ignored: the emulated host 'pvetest-x' uses cgroup v2"
    ]
    assert "lxc.uts.name = llm1" in lines
    assert "lxc.rootfs.path = dir:/r" in lines
    assert not any("509" in ln or "gone" in ln for ln in lines)  # snapshot ignored


def test_include_falls_back_to_common_conf_as_update_lxc_config(
    node: Node, lxc_config_dir: Path
) -> None:
    """``$inc = "$cfgpath/common.conf" if !-f $inc``: a config dir without the ostype's
    file (a machine without lxc-templates) gets the generic include, not a failure."""
    (lxc_config_dir / "debian.common.conf").unlink()
    lines, _ = _plan(node, "v1", config_dir=lxc_config_dir)
    assert lines[1] == f"lxc.include = {lxc_config_dir}/common.conf"
    lines, _ = _plan(node, "v1", CONF.replace("ostype: debian", "ostype: alpine"))
    assert lines[1] == "lxc.include = /nonexistent/common.conf"


def test_deny_write_device_is_read_only_in_both_lines(node: Node) -> None:
    """update_lxc_config: ``allow ... r`` and ``deny ... w`` for ``deny-write=1``."""
    conf = CONF.replace("dev0: /dev/nvidia1,gid=44", "dev0: /dev/nvidia1,deny-write=1")
    lines, _ = _plan(node, "v2", conf)
    assert "lxc.cgroup2.devices.allow = c 195:1 r" in lines
    assert "lxc.cgroup2.devices.deny = c 195:1 w" in lines
    assert "lxc.cgroup2.devices.allow = c 195:1 rw" not in lines


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("arch: amd64\n", "missing 'arch' - internal error"),
        ("ostype: debian\n", "missing 'ostype'"),
    ],
)
def test_missing_arch_or_ostype_is_pves_internal_error(node: Node, drop: str, message: str) -> None:
    with pytest.raises(StartError, match=message):
        _plan(node, "v1", CONF.replace(drop, ""))


def test_entrypoint_console_env_and_mount_points(node: Node) -> None:
    node.host_path("/srv/models").mkdir(parents=True)
    extra = (
        "entrypoint: /usr/bin/python3 -m app\nconsole: 0\ntty: 4\n"
        "mp0: /srv/models,mp=/models,ro=1,mountoptions=nosuid;nodev\n"
        "lxc.environment.runtime: A=1\nlxc.environment.runtime: B=2\n"
    )
    lines, _ = _plan(node, "v2", CONF.replace("hostname: llm1\n", f"hostname: llm1\n{extra}"))
    assert lines[2] == "lxc.mount.entry = shm dev/shm tmpfs rw,nosuid,nodev,create=dir 0 0"
    assert "lxc.init.cmd = /usr/bin/python3 -m app" in lines
    assert "lxc.console.path = none" in lines
    assert "lxc.cgroup2.devices.deny = c 5:1 rwm" in lines
    assert "lxc.tty.max = 4" in lines
    assert [ln for ln in lines if ln.startswith("lxc.environment.runtime")] == [
        "lxc.environment.runtime = A=1",
        "lxc.environment.runtime = B=2",
    ]
    models = node.host_path("/srv/models")
    assert f"lxc.mount.entry = {models} models none bind,create=dir,ro,nosuid,nodev 0 0" in lines
    # /sbin/init as entrypoint: no tmpfs (an init system sets /dev/shm up)
    lines, _ = _plan(node, "v2", CONF.replace("hostname: llm1\n", "entrypoint: /sbin/init\n"))
    assert not any("dev/shm" in ln for ln in lines)


def test_v2_host_on_a_v2_machine_keeps_v2_key(node: Node) -> None:
    lines, _ = _plan(node, "v2")
    assert "lxc.cgroup2.devices.allow = c 195:* rwm" in lines
    assert "lxc.cgroup2.devices.allow = c 195:1 rw" in lines
    assert not any(ln.startswith("lxc.cgroup.devices") for ln in lines)


def test_v1_host_drops_v2_lines(tmp_path: Path) -> None:
    node = Node(name="pvetest-y", root=tmp_path / "y", cgroup="v1", lxcpath=tmp_path / "lxc")
    init_cluster(tmp_path / "c", [node])
    os.mknod(node.host_path("/dev/nvidia1"), 0o020660, os.makedev(195, 1))
    lines, warnings = _plan(node, "v1")
    assert "lxc.cgroup.devices.allow = c 10:200 rwm" in lines
    assert "lxc.cgroup.devices.allow = c 195:* rwm" not in lines
    assert "lxc.cgroup.devices.allow = c 195:1 rw" in lines  # devN uses the host's key
    assert warnings == [
        "lxc.cgroup2.devices.allow ignored: the emulated host 'pvetest-y' uses cgroup v1"
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("dev1: /dev/nvidia9\n", "Device /dev/nvidia9 does not exist"),
        ("dev1: /dev/../etc/pve\n", "(?s)unable to parse dev1: .*is not a valid device path"),
        ("dev1: gid=5\n", "Path is not defined for passthrough device dev1"),
        ("unprivileged: 1\n", "unprivileged containers"),
        ("template: 1\n", "you can't start a CT if it's a template"),
    ],
)
def test_start_refusals(node: Node, extra: str, message: str) -> None:
    with pytest.raises(StartError, match=message):
        _plan(node, "v1", CONF.replace("hostname: llm1\n", f"hostname: llm1\n{extra}"))


def test_a_regular_file_is_not_a_device(node: Node) -> None:
    node.host_path("/dev/notadev").write_text("")
    conf = CONF.replace("hostname: llm1\n", "hostname: llm1\ndev1: /dev/notadev\n")
    with pytest.raises(StartError, match="/dev/notadev is not a device"):
        _plan(node, "v1", conf)


def test_layout_paths_and_validation(tmp_path: Path, node: Node) -> None:
    assert node.volume_path("local:100/subvol-100-disk-0.subvol") == (
        node.root / "var/lib/vz/images/100/subvol-100-disk-0.subvol"
    )
    assert node.volume_path("local:vztmpl/t.tar") == node.root / "var/lib/vz/template/cache/t.tar"
    with pytest.raises(ValidationError, match="storage 'nfs' does not exist"):
        node.volume_path("nfs:100/x")
    with pytest.raises(ValidationError, match=r"node\.name"):
        Node(name="bad_name", root=tmp_path)
    with pytest.raises(ValidationError, match=r"node\.cgroup"):
        Node(name="ok", root=tmp_path, cgroup="v3")
    cluster = Cluster.load(tmp_path / "cluster")
    assert cluster.node("pvetest-x").root == node.root
    assert Node.from_root(node.root) == node
    with pytest.raises(ValidationError, match="no such cluster node 'nope'"):
        cluster.node("nope")
    storages = read_storage_cfg("dir: local\n\tpath /var/lib/vz\n\tcontent rootdir,vztmpl\n")
    assert storages["local"].content == ["rootdir", "vztmpl"]


def test_schema_lookup_prefers_literal_segments() -> None:
    ep = find_endpoint("GET", "/nodes/pve1/lxc/101/status/current")
    assert ep.template == "/nodes/{node}/lxc/{vmid}/status/current"
    assert ep.path_params == {"node": "pve1", "vmid": "101"}
    assert find_endpoint("GET", "/cluster/mapping/pci").template == "/cluster/mapping/pci"


def test_schema_checks_types_and_property_strings() -> None:
    _, typed = check_call(
        "POST", "/nodes/pve1/lxc/101/migrate", {"target": "pve2", "restart": "1", "timeout": "30"}
    )
    assert typed == {"target": "pve2", "restart": 1, "timeout": 30, "node": "pve1", "vmid": 101}
    with pytest.raises(ApiError) as exc:
        check_call(
            "PUT",
            "/nodes/pve1/lxc/101/config",
            {"dev0": "/dev/nvidia0,colour=red", "dev300": "/dev/x"},
        )
    assert exc.value.status == 400
    assert exc.value.message == "Parameter verification failed."
    assert exc.value.errors == {
        # PVE::JSONSchema::parse_property_string dies on an unknown key before check_object
        "dev0": "invalid format - invalid key in comma-separated list property: colour\n",
        "dev300": "property is not defined in schema and the schema does not allow "
        "additional properties",
    }
    with pytest.raises(ApiError, match="501 Method 'PATCH /version' not implemented"):
        check_call("PATCH", "/version")


def test_calls_in_for_project_wide_checks() -> None:
    assert (
        calls_in(
            [
                ("POST", "/nodes/{node}/lxc/{vmid}/migrate", ["target", "restart", "timeout"]),
                ("GET", "/cluster/resources", ["type"]),
            ]
        )
        == []
    )
    assert calls_in(
        [
            ("POST", "/nodes/{node}/lxc/{vmid}/migrate", ["target", "live"]),
            ("GET", "/nodes/{node}/lxc/{vmid}/gpu", []),
        ]
    ) == [
        "POST /nodes/{node}/lxc/{vmid}/migrate: parameter 'live': property is not defined in "
        "schema and the schema does not allow additional properties",
        "Method 'GET /nodes/{node}/lxc/{vmid}/gpu' not implemented",
    ]


def test_migrate_refuses_local_bind_mount_and_changes_nothing(tmp_path: Path) -> None:
    cluster = make_test_cluster(tmp_path, None)
    a = cluster.node("pvetest-a")
    a.volume_path("local:120/subvol-120-disk-0.subvol").mkdir(parents=True)
    text = (
        "arch: amd64\nostype: debian\nmp0: /srv/models,mp=/models\n"
        "rootfs: local:120/subvol-120-disk-0.subvol,size=0G\n"
    )
    a.ct_conf(120).write_text(text)
    log: list[str] = []
    # AbstractMigrate.pm: an error in prepare/phase1 ends the task with "migration aborted"
    with pytest.raises(pct.PveError, match=r"^migration aborted$") as exc:
        migrate.ct_migrate(cluster, a, 120, "pvetest-b", log.append)
    assert str(exc.value.__cause__) == "cannot migrate local bind mount point 'mp0'"
    assert any("migration aborted" in ln and "mount point 'mp0'" in ln for ln in log)
    assert a.ct_conf(120).read_text() == text
    assert not cluster.node("pvetest-b").ct_conf(120).exists()
    # shared=1 lets it go: conf and the rootfs dir move to the target's root.
    a.ct_conf(120).write_text(text.replace("mp=/models", "mp=/models,shared=1"))
    migrate.ct_migrate(cluster, a, 120, "pvetest-b")
    b = cluster.node("pvetest-b")
    assert b.volume_path("local:120/subvol-120-disk-0.subvol").is_dir()
    assert not a.ct_conf(120).exists()
    assert "shared=1" in b.ct_conf(120).read_text()
