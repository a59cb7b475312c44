"""The container description: parsing, cluster checks and the change plan (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.pve.container import (
    ClusterView,
    SpecError,
    check_cluster,
    create_params,
    parse_spec,
    plan_changes,
    wanted_config,
)
from ansible_collections.specops.infra.plugins.modules import pve_container as module
from hypothesis import given
from hypothesis import strategies as st
from lifecycle_lab import COMMUNITY_PROXMOX_CALLS

from specops_lab.pve_schema import calls_in, check_call

GIB = 1024**3

BASE: dict[str, Any] = {
    "vmid": 801,
    "hostname": "lifecycle-ct801",
    "node": "pve-a",
    "ostemplate": "local:vztmpl/debian-bookworm-rootfs.tar",
    "cores": 4,
    "memory": 8192,
    "swap": 0,
    "rootfs_storage": "local-zfs",
    "rootfs_size": 32,
    "unprivileged": False,
    "features": {"nesting": True},
    "mounts": [{"host_path": "/srv/models", "mountpoint": "/var/cache/specops"}],
    "net": [{"name": "eth0", "bridge": "vmbr0", "ip": "dhcp"}],
    "onboot": True,
    "tags": ["specops", "qwen"],
}

VIEW = ClusterView(
    nodes=["pve-a", "pve-b"],
    guests=[
        {"vmid": 200, "type": "qemu", "name": "trainer", "node": "pve-a"},
        {"vmid": 801, "type": "lxc", "name": "lifecycle-ct801", "node": "pve-a"},
        {"vmid": 802, "type": "lxc", "name": "other", "node": "pve-b"},
    ],
    storages=[
        {"storage": "local", "content": "iso,vztmpl,backup"},
        {"storage": "local-zfs", "content": "images,rootdir"},
    ],
    node_memory=64 * GIB,
    node_cpus=16,
    templates=["local:vztmpl/debian-bookworm-rootfs.tar"],
)

# The live config of 801 as PVE answers GET .../config after the role created it.
LIVE: dict[str, Any] = {
    "arch": "amd64",
    "cores": 4,
    "digest": "0" * 40,
    "features": "nesting=1",
    "hostname": "lifecycle-ct801",
    "memory": 8192,
    "mp0": "/srv/models,mp=/var/cache/specops,shared=1",
    "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth",
    "onboot": 1,
    "ostype": "debian",
    "rootfs": "local-zfs:subvol-801-disk-0,size=32G",
    "swap": 0,
    "tags": "qwen;specops",
}


def spec(**over: Any) -> Any:
    return parse_spec({**BASE, **over})


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"vmid": 42}, "pve_container_vmid", "100..999999999"),
        ({"vmid": "abc"}, "pve_container_vmid", "integer"),
        ({"vmid": True}, "pve_container_vmid", "integer"),
        ({"memory": 8}, "pve_container_memory", "16..268435456 MiB"),
        ({"cores": 0}, "pve_container_cores", "1..8192"),
        ({"rootfs_size": 0}, "pve_container_rootfs_size", "GiB"),
        ({"hostname": "bad_name"}, "pve_container_hostname", "DNS host name"),
        ({"ostemplate": "debian.tar"}, "pve_container_ostemplate", "STORAGE:vztmpl/FILE"),
        ({"rootfs_storage": "1x"}, "pve_container_rootfs_storage", "storage id"),
        ({"features": {"nested": True}}, "pve_container_features.nested", "unknown feature"),
        ({"features": {"nesting": "maybe"}}, "pve_container_features.nesting", "true or false"),
        (
            {"mounts": [{"host_path": "srv", "mountpoint": "/m"}]},
            "pve_container_mounts[0].host_path",
            "absolute",
        ),
        (
            {"mounts": [{"host_path": "/a", "mountpoint": "/m", "size": 3}]},
            "pve_container_mounts[0].size",
            "unknown key",
        ),
        ({"net": [{"bridge": "vmbr0"}]}, "pve_container_net[0]", "'name'"),
        (
            {"net": [{"name": "eth0", "ip": "10.0.0.2/24, gw=x"}]},
            "pve_container_net[0].ip",
            "commas",
        ),
        ({"tags": ["-x"]}, "pve_container_tags", "not valid"),
        ({"unprivileged": "sometimes"}, "pve_container_unprivileged", "true or false"),
    ],
)
def test_bad_description_names_the_variable(over: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as exc:
        spec(**over)
    assert exc.value.field == field
    assert str(exc.value).startswith(f"{field}: ")
    assert words in str(exc.value)


def test_mounts_default_to_shared_and_values_are_what_pve_takes() -> None:
    s = spec()
    assert s.mounts[0].shared is True
    config = wanted_config(s)
    assert config["mp0"] == "/srv/models,mp=/var/cache/specops,shared=1"
    assert config["net0"] == "name=eth0,bridge=vmbr0,ip=dhcp"
    assert config["tags"] == "qwen;specops"
    assert config["features"] == "nesting=1"
    # Every value PUT would send passes the PVE 9.1 schema.
    check_call("PUT", "/nodes/pve-a/lxc/801/config", config)
    create = create_params(s)
    assert create["disk_volume"] == {"storage": "local-zfs", "size": 32}
    assert create["mount_volumes"][0]["options"] == {"shared": 1}


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"vmid": 200}, "pve_container_vmid", "taken by VM 'trainer' (qemu)"),
        ({"vmid": 802}, "pve_container_node", "lives on node 'pve-b'"),
        ({"node": "pve-c"}, "pve_container_node", "have: pve-a, pve-b"),
        ({"rootfs_storage": "ceph"}, "pve_container_rootfs_storage", "does not exist"),
        ({"rootfs_storage": "local"}, "pve_container_rootfs_storage", "use one of: local-zfs"),
        (
            {"vmid": 803, "ostemplate": "local:vztmpl/nope.tar.zst"},
            "pve_container_ostemplate",
            "is not on node",
        ),
        (
            {"vmid": 803, "ostemplate": "nfs:vztmpl/x.tar"},
            "pve_container_ostemplate",
            "storage 'nfs'",
        ),
        ({"memory": 65537}, "pve_container_memory", "more than node 'pve-a' has (65536 MiB)"),
        ({"cores": 17}, "pve_container_cores", "(16 CPUs)"),
    ],
)
def test_cluster_refusals_name_the_variable(over: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as exc:
        check_cluster(spec(**over), VIEW)
    assert exc.value.field == field
    assert words in str(exc.value)


def test_existing_container_needs_no_template() -> None:
    # A template removed after creation does not matter for an existing container.
    assert check_cluster(spec(ostemplate="local:vztmpl/gone.tar"), VIEW) is True
    assert check_cluster(spec(vmid=803), VIEW) is False


def test_matching_config_plans_nothing() -> None:
    assert plan_changes(spec(), LIVE) == []
    # tag order and extra live features / net keys (hwaddr) are not differences
    assert plan_changes(spec(tags=["specops", "qwen"]), {**LIVE, "tags": "specops;qwen"}) == []
    # PVE stores tags lower-cased (get_unique_tags): "Qwen" as described is no change
    assert plan_changes(spec(tags=["specops", "Qwen"]), {**LIVE, "tags": "qwen;specops"}) == []
    assert wanted_config(spec(tags=["Specops", "QWEN", "qwen"]))["tags"] == "qwen;specops"


def test_plan_sorts_each_difference() -> None:
    changes = plan_changes(
        spec(
            cores=8,
            memory=16384,
            onboot=False,
            tags=["specops"],
            hostname="renamed",
            unprivileged=True,
        ),
        LIVE,
    )
    actions = {c.key: (c.action, c.value) for c in changes}
    assert actions["cores"] == ("online", 8)
    assert actions["memory"] == ("online", 16384)
    assert actions["onboot"] == ("online", 0)
    assert actions["tags"] == ("online", "specops")
    assert actions["hostname"] == ("restart", "renamed")
    assert actions["unprivileged"][0] == "rebuild"
    moved = {c.field: c.action for c in plan_changes(spec(rootfs_storage="local"), LIVE)}
    assert moved == {"pve_container_rootfs_storage": "rebuild"}


def test_rootfs_shrink_is_refused_and_growth_is_online() -> None:
    (shrink,) = plan_changes(spec(rootfs_size=16), LIVE)
    assert shrink.action == "refused"
    assert (
        "refusing to shrink the root filesystem of CT 801 from 32 GiB to 16 GiB" in shrink.message
    )
    assert "pve_container_rootfs_size >= 32" in shrink.message
    (grow,) = plan_changes(spec(rootfs_size=40), LIVE)
    assert (grow.action, grow.key, grow.value) == ("online", "rootfs", "40G")
    check_call("PUT", "/nodes/pve-a/lxc/801/resize", {"disk": "rootfs", "size": grow.value})


def test_mount_and_net_changes_need_a_restart() -> None:
    changes = plan_changes(
        spec(
            mounts=[{"host_path": "/srv/models", "mountpoint": "/var/cache/specops", "ro": True}],
            net=[{"name": "eth0", "bridge": "vmbr1", "ip": "dhcp"}],
        ),
        LIVE,
    )
    by_key = {c.key: c for c in changes}
    assert by_key["mp0"].action == "restart"
    assert by_key["mp0"].value == "/srv/models,mp=/var/cache/specops,shared=1,ro=1"
    assert by_key["net0"].action == "restart"
    # the live hwaddr is kept when the bridge changes
    assert "hwaddr=BC:24:11:00:00:01" in by_key["net0"].value
    assert "bridge=vmbr1" in by_key["net0"].value


def test_every_api_call_is_in_the_pve_schema() -> None:
    assert calls_in(module.API_CALLS) == []
    assert calls_in(COMMUNITY_PROXMOX_CALLS) == []


_names = st.from_regex(r"[a-z][a-z0-9]{0,10}", fullmatch=True)
_paths = st.lists(_names, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))


@st.composite
def _descriptions(draw: st.DrawFn) -> dict[str, Any]:
    mounts = draw(
        st.lists(
            st.fixed_dictionaries(
                {"host_path": _paths, "mountpoint": _paths},
                optional={"shared": st.booleans(), "backup": st.booleans(), "ro": st.booleans()},
            ),
            max_size=3,
            unique_by=lambda m: m["mountpoint"],
        )
    )
    nets = draw(
        st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["eth0", "eth1"])},
                optional={"bridge": st.sampled_from(["vmbr0", "vmbr1"]), "ip": st.just("dhcp")},
            ),
            max_size=2,
        )
    )
    return {
        **BASE,
        "cores": draw(st.integers(1, 16)),
        "memory": draw(st.integers(16, 65536)),
        "swap": draw(st.integers(0, 8192)),
        "rootfs_size": draw(st.integers(1, 500)),
        "unprivileged": draw(st.booleans()),
        "onboot": draw(st.booleans()),
        "features": draw(
            st.dictionaries(st.sampled_from(["nesting", "fuse", "keyctl"]), st.booleans())
        ),
        "tags": draw(st.lists(_names, max_size=4)),
        "mounts": mounts,
        "net": nets,
    }


@given(_descriptions())
def test_a_config_written_from_the_description_plans_nothing(data: dict[str, Any]) -> None:
    """Round trip: what the role writes (create + PUT), read back as PVE answers it, is
    no difference; each value also passes the PVE 9.1 schema."""
    s = parse_spec(data)
    written = wanted_config(s)
    check_call("PUT", "/nodes/pve-a/lxc/801/config", written)
    live = {
        **{k: v for k, v in written.items() if v != ""},
        "rootfs": f"{s.rootfs_storage}:subvol-801-disk-0,size={s.rootfs_size}G",
        "digest": "0" * 40,
    }
    assert plan_changes(s, live) == []
