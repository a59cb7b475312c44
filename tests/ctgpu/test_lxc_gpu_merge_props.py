"""Property tests of the managed-lines merge: idempotent, other lines and snapshots kept.

pve_conf's own round-trip properties live in tests/lab/test_pve_conf.py; these cover what
lxc_gpu.merge adds on top of it, on arbitrary confs mixing stale GPU lines of another
host (any of the two methods, both cgroup keys), other devices, comments, odd spacing,
snapshot and pending sections, with and without a final newline.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.lxc_gpu import (
    Device,
    is_gpu_raw_line,
    merge,
)
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import (
    parse,
    parse_property_string,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

GPU_MAJORS = {195, 511, 508, 509, 510}
FOREIGN = {10: "misc", 226: "drm", 240: "tpm"}

OTHER_KEYS = st.sampled_from(
    [
        "cores: 8",
        "hostname: ctgpu-llm",
        "memory: 65536",
        "mp0: /srv/models,mp=/models,shared=1",
        "net0: name=eth0,bridge=vmbr0,ip=dhcp,type=veth",
        "features: nesting=1",
        "onboot:   1",
        "rootfs: local:901/vm-901-disk-0.raw,size=64G",
    ]
)
OTHER_RAW = st.sampled_from(
    [
        "lxc.cgroup2.devices.allow: c 10:200 rwm",
        "lxc.cgroup2.devices.allow: c 226:* rwm",
        "lxc.cgroup.devices.allow: c 226:128 rwm",
        "lxc.cgroup2.devices.allow: a",
        "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file",
        "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir",
        "lxc.idmap = u 0 100000 65536",
        "lxc.apparmor.profile: unconfined",
    ]
)
COMMENT = st.from_regex(r"#[ -~]{0,30}", fullmatch=True)
BLANK = st.sampled_from(["", "   "])
GPU_PATHS = [
    "/dev/nvidia0",
    "/dev/nvidia1",
    "/dev/nvidia2",
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
    "/dev/nvidia-caps/nvidia-cap1",
]


@st.composite
def stale_gpu_raw(draw: st.DrawFn) -> str:
    key = draw(st.sampled_from(["lxc.cgroup2.devices.allow", "lxc.cgroup.devices.allow"]))
    if draw(st.booleans()):
        major = draw(st.sampled_from([195, 509, 511, 508, 505, 237]))
        minor = draw(st.sampled_from(["*", "0", "1", "2", "255"]))
        return f"{key}: c {major}:{minor} rwm"
    path = draw(st.sampled_from(GPU_PATHS))
    return f"lxc.mount.entry: {path} {path[1:]} none bind,optional,create=file"


@st.composite
def conf_text(draw: st.DrawFn) -> str:
    kinds = st.one_of(
        OTHER_KEYS,
        OTHER_RAW,
        COMMENT,
        BLANK,
        stale_gpu_raw(),
        st.sampled_from(GPU_PATHS).map(lambda p: f"DEV {p},mode=0660"),
        st.just("DEV /dev/dri/renderD128,gid=104"),
    )
    lines = draw(st.lists(kinds, max_size=25))
    # devN indices unique, as PVE keeps them; some gaps.
    free = iter(draw(st.permutations(list(range(12)))))
    main = [f"dev{next(free)}: {ln[4:]}" if ln.startswith("DEV ") else ln for ln in lines]
    sections = []
    for name in draw(st.lists(st.sampled_from(["snap1", "pre-gpu", "pve:pending"]), unique=True)):
        body = draw(st.lists(st.one_of(OTHER_KEYS, OTHER_RAW, stale_gpu_raw(), BLANK), max_size=6))
        sections.append("\n".join([f"[{name}]", *body]))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    text = eol.join([*main, "", *sections] if sections else main)
    if text and draw(st.booleans()):
        text += eol
    return text


DEVICES = {
    "b": [
        Device("/dev/nvidia2", 195, 2, "card", "0000:41:00.0"),
        Device("/dev/nvidia3", 195, 3, "card", "0000:61:00.0"),
        Device("/dev/nvidiactl", 195, 255, "ctl"),
        Device("/dev/nvidia-uvm", 511, 0, "uvm"),
        Device("/dev/nvidia-uvm-tools", 511, 1, "uvm-tools"),
    ],
    "one": [
        Device("/dev/nvidia0", 195, 0, "card", "0000:01:00.0"),
        Device("/dev/nvidiactl", 195, 255, "ctl"),
        Device("/dev/nvidia-uvm", 511, 0, "uvm"),
        Device("/dev/nvidia-uvm-tools", 511, 1, "uvm-tools"),
        Device("/dev/nvidia-caps/nvidia-cap1", 508, 1, "cap"),
    ],
    "none": [],
}


def _merge(text: str, devices: list[Device], method: str, key: str) -> Any:
    return merge(
        parse(text),
        devices,
        method=method,
        cgroup_key=key,
        gpu_majors=GPU_MAJORS,
        foreign_majors=FOREIGN,
        dev_mode="0666",
    )


def _split(text: str) -> tuple[str, str]:
    conf = parse(text)
    main = "".join(ln.raw for ln in conf.main.lines)
    return main, text[len(main) :]


def _is_gpu(line: Any, evidence: bool) -> bool:
    if line.kind == "lxc":
        return is_gpu_raw_line(
            line.key,
            line.value,
            gpu_majors=GPU_MAJORS,
            foreign_majors=FOREIGN,
            evidence=evidence,
        )
    if line.kind == "key" and line.key.startswith("dev") and line.key[3:].isdigit():
        return parse_property_string(line.value, "path")["path"].startswith("/dev/nvidia")
    return False


def _evidence(text: str, devices: list[Device]) -> bool:
    conf = parse(text)
    return bool(devices) or any(
        (ln.kind == "lxc" and ("/dev/nvidia" in ln.value or " 195:" in f" {ln.value}"))
        or (ln.kind == "key" and _is_gpu(ln, False))
        for ln in conf.main.lines
    )


def _others(text: str, evidence: bool) -> list[str]:
    conf = parse(text)
    return [ln.raw.rstrip("\r\n") for ln in conf.main.lines if not _is_gpu(ln, evidence)]


@settings(max_examples=300, deadline=None)
# Found by CI: the last line (a GPU line, no final newline) removed after a blank line;
# the blank line must stay.
@example(
    text="\nlxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
    which="none", method="dev", key="lxc.cgroup2.devices.allow",
)  # fmt: skip
@given(
    text=conf_text(),
    which=st.sampled_from(sorted(DEVICES)),
    method=st.sampled_from(["dev", "raw"]),
    key=st.sampled_from(["lxc.cgroup2.devices.allow", "lxc.cgroup.devices.allow"]),
)
def test_merge_properties(text: str, which: str, method: str, key: str) -> None:
    devices = DEVICES[which]
    first = _merge(text, devices, method, key)
    after = first.after
    # Lossless text, snapshots and pending byte-identical.
    assert parse(after).render() == after
    assert _split(after)[1] == _split(text)[1]
    # Every non-GPU line of the main section is kept, in its order, with its text.
    evidence = _evidence(text, devices)
    assert _others(after, evidence) == _others(text, evidence)
    # The GPU lines are exactly the wanted ones.
    conf = parse(after)
    got_raw = [(k, v) for k, v in conf.lxc() if _is_gpu(_line(k, v), evidence)]
    got_dev = sorted(
        parse_property_string(v, "path")["path"]
        for i, v in conf.indexed("dev").items()
        if v.startswith("/dev/nvidia")
    )
    if method == "raw" or not devices:
        assert got_dev == []
        want = [(key, f"c {d.major}:{d.minor} rwm") for d in devices] + [
            ("lxc.mount.entry", f"{d.path} {d.path[1:]} none bind,optional,create=file")
            for d in devices
        ]
        assert got_raw == want
    else:
        assert got_raw == []
        assert got_dev == sorted(d.path for d in devices)
    # Idempotent: a second run changes nothing, also after PVE reorders the dev keys.
    second = _merge(after, devices, method, key)
    assert second.after == after
    assert not second.changed
    assert first.changed == (after != text)


def _line(key: str, value: str) -> Any:
    return parse(f"{key}: {value}\n").main.lines[0]
