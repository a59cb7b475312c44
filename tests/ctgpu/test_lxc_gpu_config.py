"""lxc_gpu_config: lines from the GPU facts, merged into a PVE container conf."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.lxc_gpu import (
    Device,
    LxcGpuError,
    NodeStat,
    choose_cgroup_key,
    choose_method,
    ipc_lines,
    ipc_wanted,
    merge,
    plan_devices,
    privilege_problems,
    select_gpus,
)
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import parse
from ansible_collections.specops.infra.plugins.modules.lxc_gpu_config import configure

SNAPSHOT = """
[before-upgrade]
#kept as it was on the old host
arch: amd64
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 509:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
snaptime: 1732000000
"""

# Configured on a host whose uvm major was 509, with its cards at minors 0 and 1.
MIGRATED = (
    """\
#qwen server%3A migrated from pve-old
arch: amd64
cores: 8
hostname: ctgpu-llm
memory: 65536
ostype: debian
rootfs: local:901/vm-901-disk-0.raw,size=64G
lxc.cgroup2.devices.allow: c 195:0 rwm
lxc.cgroup2.devices.allow: c 195:1 rwm
lxc.cgroup2.devices.allow: c 10:200 rwm
lxc.cgroup2.devices.allow: c 195:255 rwm
lxc.cgroup2.devices.allow: c 509:0 rwm
lxc.cgroup2.devices.allow: c 509:1 rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file
lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file
"""
    + SNAPSHOT
)

MIGRATED_RAW_AFTER = """\
#qwen server%3A migrated from pve-old
arch: amd64
cores: 8
hostname: ctgpu-llm
memory: 65536
ostype: debian
rootfs: local:901/vm-901-disk-0.raw,size=64G
lxc.cgroup2.devices.allow: c 195:2 rwm
lxc.cgroup2.devices.allow: c 195:3 rwm
lxc.cgroup2.devices.allow: c 195:255 rwm
lxc.cgroup2.devices.allow: c 511:0 rwm
lxc.cgroup2.devices.allow: c 511:1 rwm
lxc.mount.entry: /dev/nvidia2 dev/nvidia2 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file
lxc.cgroup2.devices.allow: c 10:200 rwm
lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file
"""

CARDS = ["0000:41:00.0", "0000:61:00.0"]  # minors 2 and 3 on pve-b


def _params(facts: dict[str, Any], root: Path, **over: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "vmid": 901,
        "gpu_facts": facts,
        "gpus": list(CARDS),
        "gpu_model": None,
        "gpu_count": 1,
        "method": "auto",
        "cgroup": "auto",
        "modeset": False,
        "caps": [],
        "dev_mode": "0666",
        "dev_gid": None,
        # The GPU-line tests below look at the GPU lines alone; the NCCL lines of a
        # multi-card container have tests of their own (ipc_limits auto).
        "ipc_limits": "never",
        "shm_size": "50%",
        "memlock": "unlimited",
        "state": "present",
        "root": str(root),
        "lock_timeout": 5,
    }
    params.update(over)
    return params


def _merge(facts: dict[str, Any], text: str, method: str, cards: list[str] = CARDS) -> Any:
    conf = parse(text)
    devices = plan_devices(facts, cards) if cards else []
    return merge(
        conf,
        devices,
        method=method,
        cgroup_key="lxc.cgroup2.devices.allow",
        gpu_majors={int(v) for v in facts["char_majors"].values()},
        foreign_majors={10: "misc"},
        dev_mode="0666",
    )


def test_devices_from_facts_by_device_minor_and_proc_devices(pve_b_facts: dict[str, Any]) -> None:
    devices = plan_devices(pve_b_facts, ["41:00.0", "0000:61:00.0"], modeset=True, caps=[2, 1])
    assert [(d.path, d.major, d.minor, d.kind) for d in devices] == [
        ("/dev/nvidia2", 195, 2, "card"),
        ("/dev/nvidia3", 195, 3, "card"),
        ("/dev/nvidiactl", 195, 255, "ctl"),
        ("/dev/nvidia-uvm", 511, 0, "uvm"),
        ("/dev/nvidia-uvm-tools", 511, 1, "uvm-tools"),
        ("/dev/nvidia-modeset", 195, 254, "modeset"),
        ("/dev/nvidia-caps/nvidia-cap1", 508, 1, "cap"),
        ("/dev/nvidia-caps/nvidia-cap2", 508, 2, "cap"),
    ]
    assert devices[0].address == "0000:41:00.0"


def test_device_minor_not_index(pve_b_facts: dict[str, Any]) -> None:
    """A card's node follows its Device Minor even when that differs from its order."""
    facts = copy.deepcopy(pve_b_facts)
    facts["gpus"][0]["nvidia"]["minor"] = 3
    facts["gpus"][3]["nvidia"]["minor"] = 0
    devices = plan_devices(facts, ["0000:01:00.0"])
    assert devices[0].path == "/dev/nvidia3"


def test_migrated_conf_corrected_in_place_raw(pve_b_facts: dict[str, Any]) -> None:
    first = _merge(pve_b_facts, MIGRATED, "raw")
    assert first.changed
    assert first.after == MIGRATED_RAW_AFTER + SNAPSHOT
    assert "lxc.cgroup2.devices.allow: c 509:0 rwm" in first.removed
    second = _merge(pve_b_facts, first.after, "raw")
    assert not second.changed
    assert second.after == first.after
    assert second.added == []
    assert second.removed == []


def test_migrated_conf_to_dev_entries(pve_b_facts: dict[str, Any]) -> None:
    first = _merge(pve_b_facts, MIGRATED, "dev")
    main = first.after.split("\n[before-upgrade]")[0]
    assert first.after.endswith(SNAPSHOT)
    assert "dev0: /dev/nvidia2,mode=0666" in main
    assert "dev4: /dev/nvidia-uvm-tools,mode=0666" in main
    for gone in ("c 195:0", "c 509:", "/dev/nvidia0 ", "/dev/nvidia1 "):
        assert gone not in main
    # Not GPU lines: kept, in their order.
    assert "lxc.cgroup2.devices.allow: c 10:200 rwm\nlxc.mount.entry: /dev/net/tun" in main
    assert not _merge(pve_b_facts, first.after, "dev").changed


def test_dev_entries_keep_index_and_survive_pve_reordering(pve_b_facts: dict[str, Any]) -> None:
    text = (
        "arch: amd64\ndev0: /dev/dri/renderD128,gid=104\ndev3: /dev/nvidia3,mode=0666\n"
        "hostname: a\ndev1: /dev/nvidia0\nrootfs: local:9/x.raw\n"
    )
    result = _merge(pve_b_facts, text, "dev")
    conf = parse(result.after)
    assert conf.indexed("dev") == {
        0: "/dev/dri/renderD128,gid=104",  # not a GPU node: untouched
        1: "/dev/nvidia2,mode=0666",  # stale nvidia0 removed, index reused
        2: "/dev/nvidiactl,mode=0666",
        3: "/dev/nvidia3,mode=0666",  # kept where it was
        4: "/dev/nvidia-uvm,mode=0666",
        5: "/dev/nvidia-uvm-tools,mode=0666",
    }
    # PVE sorts keys when it writes a conf: the same entries in another order are no change.
    lines = result.after.splitlines(keepends=True)
    reordered = "".join(sorted(lines))
    assert not _merge(pve_b_facts, reordered, "dev").changed


def test_absent_removes_every_gpu_line(pve_b_facts: dict[str, Any]) -> None:
    result = _merge(pve_b_facts, MIGRATED, "raw", cards=[])
    main = result.after.split("\n[before-upgrade]")[0]
    assert "nvidia" not in main
    assert "195" not in main
    assert "509" not in main
    assert "c 10:200 rwm" in main
    assert "/dev/net/tun" in main
    assert result.after.endswith(SNAPSHOT)


def test_foreign_dynamic_major_kept_with_warning(pve_b_facts: dict[str, Any]) -> None:
    text = (
        "arch: amd64\nlxc.cgroup2.devices.allow: c 195:0 rwm\n"
        "lxc.cgroup2.devices.allow: c 240:0 rwm\n"
    )
    conf = parse(text)
    result = merge(
        conf,
        plan_devices(pve_b_facts, CARDS),
        method="raw",
        cgroup_key="lxc.cgroup2.devices.allow",
        gpu_majors={195, 511},
        foreign_majors={240: "tpm"},
    )
    assert "lxc.cgroup2.devices.allow: c 240:0 rwm" in result.after
    assert result.warnings
    assert "'tpm'" in result.warnings[0]
    # An unregistered dynamic major next to GPU lines is a stale GPU line: replaced.
    result = merge(
        parse(text),
        plan_devices(pve_b_facts, CARDS),
        method="raw",
        cgroup_key="lxc.cgroup2.devices.allow",
        gpu_majors={195, 511},
        foreign_majors={},
    )
    assert "c 240:0" not in result.after


def test_dynamic_major_alone_is_not_ours(pve_b_facts: dict[str, Any]) -> None:
    """A dynamic-major allow line in a conf with no GPU: kept by state absent; a dead line
    (nothing holds 240 on pve-b) once GPUs are given, so it goes, and says so."""
    text = "arch: amd64\nlxc.cgroup2.devices.allow: c 240:0 rwm\n"
    assert not _merge(pve_b_facts, text, "raw", cards=[]).changed
    given = _merge(pve_b_facts, text, "raw")
    assert "c 240:0" not in given.after
    assert given.removed == ["lxc.cgroup2.devices.allow: c 240:0 rwm"]


def test_method_and_cgroup_choice(pve_b_facts: dict[str, Any]) -> None:
    assert choose_method(pve_b_facts, "auto") == "dev"  # PVE 8.4
    old = {**pve_b_facts, "pve_release": "8.0", "pve_version": "8.0.4"}
    assert choose_method(old, "auto") == "raw"
    with pytest.raises(LxcGpuError, match=r"^method: devN entries need PVE >= 8.1"):
        choose_method(old, "dev")
    assert choose_method({**pve_b_facts, "pve_release": None, "pve_version": None}, "auto") == "raw"
    assert choose_cgroup_key(pve_b_facts, "auto") == "lxc.cgroup2.devices.allow"
    assert choose_cgroup_key({**pve_b_facts, "cgroup": {"version": 1}}, "auto") == (
        "lxc.cgroup.devices.allow"
    )
    with pytest.raises(LxcGpuError, match=r"^cgroup: .*set cgroup to v2"):
        choose_cgroup_key({**pve_b_facts, "cgroup": {"version": None}}, "auto")


def test_select_free_cards_of_a_model(pve_b_facts: dict[str, Any]) -> None:
    model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert select_gpus(pve_b_facts, model, 2, mine=set(), others={}) == [
        "0000:01:00.0",
        "0000:21:00.0",
    ]
    # Cards this CT has come first (a re-run keeps them); others' cards are avoided.
    assert select_gpus(pve_b_facts, "10de:2bb1", 2, mine={3}, others={902: {0}}) == [
        "0000:21:00.0",
        "0000:61:00.0",
    ]
    with pytest.raises(LxcGpuError, match=r"^gpu_count: 4 free .* 3 available .*container 902"):
        select_gpus(pve_b_facts, model, 4, mine=set(), others={902: {1}})
    with pytest.raises(
        LxcGpuError, match=r"^gpu_model: no card named 'RTX 9090'.*have: 'NVIDIA RTX"
    ):
        select_gpus(pve_b_facts, "RTX 9090", 1, mine=set(), others={})
    # A part of the name is not the name (gpu_select's one rule).
    with pytest.raises(LxcGpuError, match=r"^gpu_model: no card named 'PRO 6000'.*did you mean"):
        select_gpus(pve_b_facts, "PRO 6000", 1, mine=set(), others={})


def test_refusals_name_what_to_fix(
    pve_a_facts: dict[str, Any], pve_b_facts: dict[str, Any]
) -> None:
    with pytest.raises(LxcGpuError, match=r"^gpus: 0000:09:00.0 is not an NVIDIA card of pve-b"):
        plan_devices(pve_b_facts, ["09:00.0"])
    with pytest.raises(LxcGpuError, match=r"^gpus: 'zz' is not a PCI address"):
        plan_devices(pve_b_facts, ["zz"])
    no_uvm = {**pve_b_facts, "uvm_major": None}
    with pytest.raises(LxcGpuError, match=r"nvidia-uvm module is not loaded.*nvidia_driver role"):
        plan_devices(no_uvm, CARDS)
    nodes = [n for n in pve_b_facts["device_nodes"] if n["path"] != "/dev/nvidia-uvm"]
    with pytest.raises(
        LxcGpuError, match=r"^device nodes: /dev/nvidia-uvm missing on pve-b.*nvidia_driver role's"
    ):
        plan_devices({**pve_b_facts, "device_nodes": nodes}, CARDS)
    # pve-a: its A6000s are on vfio-pci and no driver is loaded.
    with pytest.raises(LxcGpuError, match=r"^gpus: 0000:01:00.0 is bound to vfio-pci, not nvidia"):
        plan_devices(pve_a_facts, ["01:00.0"])
    with pytest.raises(LxcGpuError, match=r"^gpus: 0000:41:00.0 is bound to vfio-pci"):
        plan_devices(pve_a_facts, ["41:00.0"])


def test_unprivileged_raw_needs_world_rw_or_idmap() -> None:
    unpriv = parse("arch: amd64\nunprivileged: 1\n")
    stats = [NodeStat("/dev/nvidia-uvm", 0o660, 0, 0), NodeStat("/dev/nvidia0", 0o666, 0, 0)]
    problems = privilege_problems(unpriv, "raw", stats)
    assert len(problems) == 1
    assert "/dev/nvidia-uvm is mode 0660 uid 0 gid 0" in problems[0]
    mapped = parse("unprivileged: 1\nlxc.idmap: g 0 0 1\nlxc.idmap: g 1 100001 65535\n")
    assert privilege_problems(mapped, "raw", stats) == []
    assert privilege_problems(unpriv, "dev", stats) == []  # PVE makes the node inside
    assert privilege_problems(parse("arch: amd64\n"), "raw", stats) == []  # privileged


def test_unprivileged_without_idmap_gets_pves_default_map() -> None:
    """No lxc.idmap line: PVE maps u/g 0 100000 65536, so a node owned by host gid
    100044 (the container's gid 44) opens; one owned by host gid 44 does not."""
    mapped = [NodeStat("/dev/nvidia-uvm", 0o660, 0, 100044)]
    unmapped = [NodeStat("/dev/nvidia-uvm", 0o660, 0, 44)]
    for flag in ("1", "yes", "on", "true"):
        conf = parse(f"arch: amd64\nunprivileged: {flag}\n")
        assert privilege_problems(conf, "raw", mapped) == [], flag
        (problem,) = privilege_problems(conf, "raw", unmapped)
        assert "gid 44 on the host and not mapped" in problem
    # A custom map replaces the default one (and makes the container unprivileged even
    # without the flag: PVE starts it in a user namespace).
    custom = parse("arch: amd64\nlxc.idmap: u 0 200000 65536\nlxc.idmap: g 0 200000 65536\n")
    assert privilege_problems(custom, "raw", mapped) != []
    assert privilege_problems(custom, "raw", [NodeStat("/dev/nvidia0", 0o660, 0, 200044)]) == []
    broken = parse("unprivileged: 1\nlxc.idmap: g 0 1\n")
    assert privilege_problems(broken, "raw", mapped) == [
        "lxc.idmap: failed to parse idmap: 'g 0 1' (want 'u|g <container id> <host id> "
        "<count>', e.g. 'g 0 100000 65536'); PVE does not start the container"
    ]


def test_configure_check_mode_diff_then_write(
    ct_root: Callable[[int, str], Path], pve_b_facts: dict[str, Any]
) -> None:
    root = ct_root(901, MIGRATED)
    conf = root / "etc/pve/lxc/901.conf"
    res = configure(_params(pve_b_facts, root, method="raw"), check_mode=True)
    assert res["changed"]
    assert conf.read_text() == MIGRATED
    assert res["diff"]["before"] == MIGRATED
    assert res["diff"]["after"] == MIGRATED_RAW_AFTER + SNAPSHOT
    inode = conf.stat().st_ino
    res = configure(_params(pve_b_facts, root, method="raw"), check_mode=False)
    assert res["changed"]
    assert conf.read_text() == MIGRATED_RAW_AFTER + SNAPSHOT
    assert conf.stat().st_ino != inode  # replaced by rename, not rewritten in place
    assert not [p for p in conf.parent.iterdir() if p.name.startswith(".")]
    res = configure(_params(pve_b_facts, root, method="raw"), check_mode=False)
    assert not res["changed"]
    assert res["gpus"] == CARDS


def test_configure_refuses_before_writing(
    ct_root: Callable[[int, str], Path], pve_b_facts: dict[str, Any]
) -> None:
    root = ct_root(901, MIGRATED)
    conf = root / "etc/pve/lxc/901.conf"
    with pytest.raises(LxcGpuError, match=r"^vmid: container 902 does not exist on pve-b"):
        configure(_params(pve_b_facts, root, vmid=902), check_mode=False)
    ct_root(903, "arch: amd64\nlock: backup\nrootfs: local:903/x.raw\n")
    with pytest.raises(LxcGpuError, match=r"^vmid: container 903 is locked \(lock: backup\)"):
        configure(_params(pve_b_facts, root, vmid=903), check_mode=False)
    with pytest.raises(LxcGpuError, match=r"^gpus: 0000:09:00.0"):
        configure(_params(pve_b_facts, root, gpus=["09:00.0"]), check_mode=False)
    with pytest.raises(LxcGpuError, match=r"^dev_mode: must be an octal mode like 0666"):
        configure(_params(pve_b_facts, root, dev_mode="rw"), check_mode=False)
    assert conf.read_text() == MIGRATED


def test_configure_selects_around_other_containers(
    ct_root: Callable[[int, str], Path], pve_b_facts: dict[str, Any]
) -> None:
    root = ct_root(902, "arch: amd64\ndev0: /dev/nvidia0\n")
    ct_root(901, "arch: amd64\nrootfs: local:901/x.raw\n")
    params = _params(pve_b_facts, root, gpus=[], gpu_model="10de:2bb1", gpu_count=2)
    res = configure(params, check_mode=False)
    assert res["gpus"] == ["0000:21:00.0", "0000:41:00.0"]
    assert res["method"] == "dev"
    assert configure(params, check_mode=False)["changed"] is False


def test_device_dataclass_dict() -> None:
    d = Device("/dev/nvidia0", 195, 0, "card", "0000:01:00.0")
    assert d.as_dict()["address"] == "0000:01:00.0"
    assert os.path.basename(d.path) == "nvidia0"


# --------------------------------------------------------------------------- NCCL's IPC

SHM_50 = "lxc.mount.entry: tmpfs dev/shm tmpfs rw,nosuid,nodev,create=dir,mode=1777,size=50% 0 0"


@pytest.mark.parametrize(
    ("mode", "cards", "wanted"),
    [("auto", 1, False), ("auto", 2, True), ("auto", 4, True), ("always", 1, True),
     ("never", 4, False)],
)  # fmt: skip
def test_ipc_lines_for_multi_card_by_default(mode: str, cards: int, wanted: bool) -> None:
    assert ipc_wanted(mode, cards) is wanted


@pytest.mark.parametrize(
    ("shm", "memlock", "error"),
    [
        ("512m", "unlimited", r"^shm_size: '512m' is below the 1g NCCL asks for .* valid: 1g"),
        ("1G ", "unlimited", None),
        ("1048576k", "unlimited", None),
        ("0%", "unlimited", r"^shm_size: '0%': valid: a percentage 1-100%"),
        ("lots", "unlimited", r"^shm_size: 'lots' is not a tmpfs size: valid: .*1g.*50%"),
        ("1g", "-1", r"^memlock: '-1': valid: unlimited .* or a limit in bytes"),
        ("1g", "67108864", None),
    ],
)
def test_ipc_lines_refuse_what_nccl_cannot_use(shm: str, memlock: str, error: str | None) -> None:
    if error is None:
        lines = ipc_lines(shm, memlock)
        assert lines[0][1].startswith("tmpfs dev/shm tmpfs ")
        assert lines[1] == ("lxc.prlimit.memlock", memlock)
    else:
        with pytest.raises(LxcGpuError, match=error):
            ipc_lines(shm, memlock)
    valid = r"\(valid: auto, always, never\)$"
    with pytest.raises(LxcGpuError, match=r"^ipc_limits: 'yes' is not a mode " + valid):
        ipc_wanted("yes", 2)


@pytest.mark.parametrize("count", [2, 4])
def test_configure_multi_card_gets_shm_and_memlock_once(
    ct_root: Callable[[int, str], Path], pve_b_facts: dict[str, Any], count: int
) -> None:
    """2 and 4 cards of the lab's pve-b: a line per card, nccl's lines once, re-run same."""
    text = "arch: amd64\nmemory: 65536\nrootfs: local:901/x.raw\n" + SNAPSHOT
    root = ct_root(901, text)
    conf = root / "etc/pve/lxc/901.conf"
    params = _params(
        pve_b_facts, root, gpus=[], gpu_model="10de:2bb1", gpu_count=count, ipc_limits="auto"
    )
    planned = configure(params, check_mode=True)
    assert planned["changed"]
    assert conf.read_text() == text
    res = configure(params, check_mode=False)
    assert len(res["gpus"]) == count
    after = conf.read_text()
    main, snap = after.split("[before-upgrade]")
    for minor in range(count):
        assert f"/dev/nvidia{minor}" in main
    assert f"/dev/nvidia{count}" not in main
    assert main.count("dev/shm") == 1
    assert main.count("lxc.prlimit.memlock") == 1
    assert f"{SHM_50}\n" in main
    assert "lxc.prlimit.memlock: unlimited\n" in main
    assert snap == SNAPSHOT.split("[before-upgrade]")[1]  # the snapshot stays as it was
    assert res["ipc"] == [SHM_50, "lxc.prlimit.memlock: unlimited"]
    assert planned["diff"]["after"] == after
    again = configure(params, check_mode=False)
    assert again["changed"] is False
    assert conf.read_text() == after
    # A new size replaces the old line rather than adding one.
    bigger = configure(dict(params, shm_size="16g"), check_mode=False)
    assert bigger["changed"]
    assert bigger["removed"] == [SHM_50, "lxc.prlimit.memlock: unlimited"]
    assert conf.read_text().count("dev/shm") == 1
    assert ",size=16g " in conf.read_text()


def test_configure_one_card_keeps_an_operators_shm_lines(
    ct_root: Callable[[int, str], Path], pve_b_facts: dict[str, Any]
) -> None:
    """auto with one card writes no NCCL lines and leaves the operator's own alone."""
    own = "lxc.prlimit.memlock: 1073741824\n"
    root = ct_root(901, "arch: amd64\nrootfs: local:901/x.raw\n" + own)
    params = _params(pve_b_facts, root, gpus=[CARDS[0]], ipc_limits="auto")
    res = configure(params, check_mode=False)
    assert res["ipc"] == []
    text = (root / "etc/pve/lxc/901.conf").read_text()
    assert own in text
    assert "dev/shm" not in text


def test_configure_refuses_small_shm_before_writing(
    ct_root: Callable[[int, str], Path], pve_b_facts: dict[str, Any]
) -> None:
    root = ct_root(901, MIGRATED)
    with pytest.raises(LxcGpuError, match=r"^shm_size: '64m' is below the 1g"):
        configure(_params(pve_b_facts, root, ipc_limits="auto", shm_size="64m"), check_mode=False)
    assert (root / "etc/pve/lxc/901.conf").read_text() == MIGRATED
