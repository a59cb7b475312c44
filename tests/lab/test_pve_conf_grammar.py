"""Two independent readers of PVE confs, one grammar: where they agree, and why.

The production parser (``module_utils/pve/conf.py``: a byte-lossless editor that runs on
the PVE hosts) and the lab stand-in's reader (``specops_lab.pve.conf``: derived from
pve-container's ``parse_pct_config`` / ``write_pct_config`` and pve-common's
``parse_property_string``) share no code, so a writer bug in production cannot hide
behind a shared reader. Both run here over the same recorded confs
(``tests/fixtures/pve-confs/``), over what each side writes, and over PVE's grammar edge
cases. Disagreements this test found were fixed on the side that differed from PVE's
source (listed in the commit that added it); the ones that remain are differences of
contract, each spelled out in :func:`_production_view`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.pve import conf as prod

from specops_lab.pve import conf as lab
from specops_lab.pve_jsonschema import parse_boolean

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pve-confs"
CONFS = sorted(FIXTURES.glob("*.conf"))
_BOOLEANS = {
    k for k, v in lab.lxc_confdesc().items() if v.get("type") == "boolean" and "[n]" not in k
}
_INTEGERS = {
    k for k, v in lab.lxc_confdesc().items() if v.get("type") == "integer" and "[n]" not in k
}


def _lab_view(text: str) -> dict[str, Any]:
    parsed = lab.parse_pct_config(100, text)

    def options(section: lab.Section) -> dict[str, str]:
        return {k: v for k, v in section.options.items() if k not in ("description", "env")}

    def pairs(section: lab.Section) -> list[tuple[str, str]]:
        env = [
            ("lxc.environment.runtime", v)
            for v in re.split(r"\0+", section.options.get("env") or "")
            if v
        ]
        return env + section.lxc

    description = parsed.main.options.get("description")
    return {
        "options": options(parsed.main),
        "lxc": sorted(pairs(parsed.main)),
        "description": description.removesuffix("\n") if description else None,
        "snapshots": {name: options(s) for name, s in sorted(parsed.snapshots.items())},
        "snapshot_lxc": {name: sorted(pairs(s)) for name, s in sorted(parsed.snapshots.items())},
        "pending": options(parsed.pending),
    }


def _pve_value(key: str, value: str) -> str:
    """What PVE's check_type makes of a raw value, for comparison with the lab reader.
    Production keeps raw text by contract (it edits bytes); the production code that
    reads a boolean reads it with ``PveConf.get_bool``, which follows check_type."""
    if key in _BOOLEANS:
        b = parse_boolean(value)
        return value if b is None else str(b)
    if key in _INTEGERS and re.fullmatch(r"\d+", value):
        return str(int(value))
    return value


def _production_view(text: str) -> dict[str, Any]:
    """The production parser's reading in the lab view's shape. Differences of contract:
    values are raw text (normalized here as PVE's check_type would); ``lxc()`` lists
    ``lxc.environment.runtime`` lines among the others (PVE keeps them as ``env``: the
    lab view lists both the same way); descriptions of snapshot sections are not read;
    the order of ``lxc`` pairs is compared as a multiset because PVE writes ``env`` first."""
    parsed = prod.parse(text)

    def options(items: dict[str, str]) -> dict[str, str]:
        return {k: _pve_value(k, v) for k, v in items.items() if k != "description"}

    snapshots = {
        s.name: s for s in parsed.sections[1:] if s.name and s.name != prod.PENDING_SECTION
    }
    pending = [s for s in parsed.sections[1:] if s.name == prod.PENDING_SECTION]
    return {
        "options": options(parsed.items()),
        "lxc": sorted(parsed.lxc()),
        "description": parsed.description,
        "snapshots": {name: options(s.items()) for name, s in sorted(snapshots.items())},
        "snapshot_lxc": {name: sorted(s.lxc()) for name, s in sorted(snapshots.items())},
        "pending": options(pending[-1].items()) if pending else {},
    }


@pytest.mark.parametrize("path", CONFS, ids=[p.name for p in CONFS])
def test_both_readers_agree_on_recorded_confs(path: Path) -> None:
    text = lab.read_conf(path)
    assert _lab_view(text) == _production_view(text)


def test_recorded_confs_are_read_as_pve_reads_them() -> None:
    """The agreed reading, spelled out for the confs that exercise the grammar."""
    written = _lab_view(lab.read_conf(FIXTURES / "pve-written-101.conf"))
    assert written["description"] == "GPU inference container: qwen\nsecond line with 100% and é"
    assert written["pending"] == {"cores": "16", "delete": "swap,tags"}
    assert written["snapshots"]["before-upgrade"]["cores"] == "4"
    assert ("lxc.environment.runtime", "HF_HOME=/models/hf") in written["lxc"]

    hand = _lab_view(lab.read_conf(FIXTURES / "hand-edited-102.conf"))
    # CRLF endings, "key:value" without a space, "lxc.key = value", booleans as words,
    # zero-padded integers and a description: line appended to the # lines.
    assert hand["options"]["hostname"] == "edited"
    assert hand["options"]["onboot"] == "1"
    assert hand["options"]["unprivileged"] == "1"
    assert hand["options"]["cores"] == "8"
    assert hand["description"] == "hand edited\r\nappended text"
    assert ("lxc.cgroup2.devices.allow", "c 195:* rwm") in hand["lxc"]

    edge = lab.parse_pct_config(103, lab.read_conf(FIXTURES / "edge-cases-103.conf"))
    main = edge.main.options
    assert "delete" not in main  # delete: only in [pve:pending]
    assert "snapstate" not in main  # dropped from the main section
    assert main["swap"] == "512"  # "[a]" is no section header (two characters at least)
    assert main["mystery"] == "kept"
    assert main["cores"] == "abc"
    assert "net-name" not in main
    assert "empty" not in main
    assert [k for k, _ in edge.main.lxc] == ["lxc.aa_profile", "lxc.limit.nofile"]
    assert list(edge.snapshots) == ["PENDING"]  # a container's [PENDING] is a snapshot
    assert edge.pending.options == {"memory": "1024", "delete": "swap"}
    assert edge.warnings == [
        "vm 103 - property 'delete' is only allowed in [pve:pending]",
        "vm 103 - lxc.rootfs.path: lxc.rootfs.path is auto generated from rootfs",
        "vm 103 - lxc.rootfs.options: lxc.rootfs.options is not supported, please use mount "
        'point options in the "rootfs" key',
        "vm 103 - unable to parse config: lxc.bogus.key: 1",
        "vm 103 - lxc.aa_profile is deprecated and was renamed to lxc.apparmor.profile",
        "vm 103 - lxc.limit.nofile: lxc.limit.* was renamed to lxc.prlimit.*",
        "vm 103 - unable to parse config: net-name: eth0",
        "vm 103 - unable to parse config: empty:",
        "vm 103 - unable to parse value of 'cores' - type check ('integer') failed - got 'abc'",
        "vm 103 - unable to parse value of 'mystery' - unknown setting 'mystery'",
        "vm 103 - unable to parse config: [a]",
    ]
    with pytest.raises(lab.ConfError, match="only allowed in"):
        lab.parse_pct_config(103, "delete: memory\n", strict=True)
    with pytest.raises(prod.PveConfError, match="line 1: unable to parse"):
        prod.parse("delete: memory\n", strict=True)


def test_what_production_writes_the_lab_reads_back() -> None:
    """Edits through the production editor, read by the lab reader."""
    for path in CONFS:
        conf = prod.parse(lab.read_conf(path))
        conf.set("cores", "12")
        conf.set("dev7", "/dev/nvidia7,mode=0666")
        conf.delete("swap")
        conf.remove_lxc(lambda k, v: v.startswith("c 509:"))
        conf.add_lxc("lxc.cgroup2.devices.allow", "c 511:* rwm")
        conf.set_description("edited by specops\nline: two 100%")
        text = conf.render()
        view = _lab_view(text)
        assert view == _production_view(text), path.name
        assert view["options"]["cores"] == "12"
        assert view["options"]["dev7"] == "/dev/nvidia7,mode=0666"
        assert "swap" not in view["options"]
        assert ("lxc.cgroup2.devices.allow", "c 511:* rwm") in view["lxc"]
        assert not any(v.startswith("c 509:") for _, v in view["lxc"])
        assert view["description"] == "edited by specops\nline: two 100%"


def test_what_the_lab_writes_production_reads_back() -> None:
    """write_pct_config output (PVE's canonical form) read by the production parser."""
    for path in CONFS:
        parsed = lab.parse_pct_config(100, lab.read_conf(path))
        text = lab.write_pct_config(parsed)
        assert _lab_view(text) == _production_view(text), path.name
        assert _lab_view(text) == _lab_view(lab.read_conf(path)), path.name


def test_write_pct_config_is_pves_canonical_form() -> None:
    parsed = lab.parse_pct_config(101, lab.read_conf(FIXTURES / "pve-written-101.conf"))
    # The fixture is in the form PVE writes (sorted keys, env then lxc, pending, then
    # snapshots sorted): writing it back changes nothing.
    assert lab.write_pct_config(parsed) == lab.read_conf(FIXTURES / "pve-written-101.conf")
    hand = lab.parse_pct_config(102, lab.read_conf(FIXTURES / "hand-edited-102.conf"))
    assert lab.write_pct_config(hand) == (
        "#hand edited%0D\n#appended text\n"  # encode_text escapes the CR; a newline is added
        "arch: amd64\ncores: 8\ndev0: /dev/dri/renderD128,gid=104,deny-write=on\n"
        "hostname: edited\nonboot: 1\nostype: ubuntu\n"
        "rootfs: local:102/subvol-102-disk-0.subvol,size=8G\nunprivileged: 1\n"
        "lxc.mount.entry: /srv/a srv/a none bind,create=dir 0 0\n"
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
    )


# (property string, the reading of PVE's parse_property_string for a devN/mpN value,
#  or the start of its error) -- production's reader must agree or refuse too.
PROPERTY_CASES: list[tuple[str, str, dict[str, Any] | str]] = [
    (
        "dev[n]",
        "/dev/nvidia0,mode=0660,gid=44",
        {"path": "/dev/nvidia0", "mode": "0660", "gid": "44"},
    ),
    ("dev[n]", "path=/dev/nvidia0", {"path": "/dev/nvidia0"}),
    ("dev[n]", "/dev/a,,uid=1, ", {"path": "/dev/a", "uid": "1"}),  # blank parts skipped
    ("dev[n]", "/dev/a,deny-write=yes", {"path": "/dev/a", "deny-write": 1}),
    ("dev[n]", "/dev/a,/dev/b", "duplicate key in comma-separated list property: path"),
    ("dev[n]", "/dev/a,mode=", "missing key in comma-separated list property"),
    ("dev[n]", "/dev/a,=0660", "missing key in comma-separated list property"),
    ("dev[n]", "/dev/a,uid=1,uid=2", "duplicate key in comma-separated list property: uid"),
    ("mp[n]", "/srv/m,mp=/m,ro=1", {"volume": "/srv/m", "mp": "/m", "ro": 1}),
    # no quoting: the comma splits the quoted value and the rest is a key without '='
    ("mp[n]", '/srv/m,mp="/a,b"', "duplicate key in comma-separated list property: volume"),
]


@pytest.mark.parametrize(("key", "value", "pve"), PROPERTY_CASES)
def test_property_strings_both_readers(key: str, value: str, pve: dict[str, Any] | str) -> None:
    fmt = lab._put_format(key)
    default = "path" if key == "dev[n]" else "volume"
    if isinstance(pve, str):
        with pytest.raises(lab.ConfError, match=re.escape(pve)):
            lab._parse(fmt, value)
        with pytest.raises(prod.PveConfError):
            prod.parse_property_string(value, default)
        return
    assert lab._parse(fmt, value) == pve
    production = prod.parse_property_string(value, default)
    booleans = {k for k, v in pve.items() if isinstance(v, int)}
    assert {k: (parse_boolean(v) if k in booleans else v) for k, v in production.items()} == pve


def test_every_recorded_property_string_reads_the_same() -> None:
    checked = 0
    for path in CONFS:
        parsed = lab.parse_pct_config(100, lab.read_conf(path))
        for key, value in parsed.main.options.items():
            fmt_key = "rootfs" if key == "rootfs" else re.sub(r"\d+$", "[n]", key)
            if fmt_key not in ("rootfs", "dev[n]", "mp[n]", "net[n]"):
                continue
            default = "path" if fmt_key == "dev[n]" else "volume" if fmt_key != "net[n]" else None
            pve = lab._parse(lab._put_format(fmt_key), value)
            production = prod.parse_property_string(value, default)
            booleans = {k for k, v in pve.items() if isinstance(v, int)}
            assert {
                k: (parse_boolean(v) if k in booleans else v) for k, v in production.items()
            } == pve, (path.name, key)
            checked += 1
    assert checked >= 8
