"""PVE guest config parser/writer: lossless round trip, main-section-only edits."""

from __future__ import annotations

import re
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import (
    PveConfError,
    format_property_string,
    parse,
    parse_property_string,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# A real-world shaped container config: description, GPU lines, a snapshot with its
# own (older) GPU lines and a pending section.
SAMPLE = """\
#GPU inference container%3A qwen
#second line
arch: amd64
cores: 8
dev0: /dev/nvidia0,gid=44,mode=0660
dev1: /dev/nvidiactl
features: nesting=1
hostname: llm1
memory: 65536
mp0: /srv/models,mp=/models,shared=1
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth
ostype: debian
rootfs: local-lvm:vm-101-disk-0,size=64G
swap: 0
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 509:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.idmap = u 0 100000 65536

[before-upgrade]
#snapshot note
arch: amd64
cores: 4
lxc.cgroup2.devices.allow: c 508:* rwm
snaptime: 1732000000

[pve:pending]
cores: 16
"""


def test_sample_round_trip_and_reading() -> None:
    conf = parse(SAMPLE, strict=True)
    assert conf.render() == SAMPLE
    assert conf.get("cores") == "8"
    assert conf.description == "GPU inference container: qwen\nsecond line"
    assert conf.lxc() == [
        ("lxc.cgroup2.devices.allow", "c 195:* rwm"),
        ("lxc.cgroup2.devices.allow", "c 509:* rwm"),
        ("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"),
        ("lxc.idmap", "u 0 100000 65536"),
    ]
    assert conf.indexed("dev") == {0: "/dev/nvidia0,gid=44,mode=0660", 1: "/dev/nvidiactl"}
    assert conf.snapshot_names() == ["before-upgrade"]
    assert conf.section("before-upgrade").items()["cores"] == "4"
    assert conf.section("pve:pending").items() == {"cores": "16"}


def test_edits_touch_main_section_only() -> None:
    conf = parse(SAMPLE)
    tail_before = SAMPLE[SAMPLE.index("[before-upgrade]") :]
    assert conf.set("cores", "12") is True
    assert conf.set("cores", "12") is False
    assert conf.set("dev2", "/dev/nvidia-uvm") is True
    assert conf.delete("swap") is True
    assert conf.delete("swap") is False
    removed = conf.remove_lxc(lambda k, v: k.endswith("devices.allow") and v.startswith("c 509:"))
    assert removed == [("lxc.cgroup2.devices.allow", "c 509:* rwm")]
    conf.add_lxc("lxc.cgroup2.devices.allow", "c 511:* rwm")
    text = conf.render()
    assert text.endswith(tail_before)
    main = text[: text.index("[before-upgrade]")]
    assert "cores: 12\n" in main
    assert "swap:" not in main
    assert "c 509:" not in main
    # New lines go after the last non-blank line, keeping the blank separator.
    assert main.endswith(
        "lxc.idmap = u 0 100000 65536\ndev2: /dev/nvidia-uvm\n"
        "lxc.cgroup2.devices.allow: c 511:* rwm\n\n"
    )
    again = parse(text, strict=True)
    assert again.get("cores") == "12"
    assert again.section("before-upgrade").items()["cores"] == "4"


def test_description_set_and_encoded() -> None:
    conf = parse("arch: amd64\n")
    conf.set_description("model: qwen 100%")
    assert conf.render() == "#model%3A qwen 100%25\narch: amd64\n"
    assert parse(conf.render()).description == "model: qwen 100%"


def test_no_trailing_newline_then_append() -> None:
    """A file without a final newline keeps that (pve-container's test-debian-007 is
    one): the added line goes after a newline and gets none; taking it away again gives
    the original bytes."""
    conf = parse("arch: amd64\ncores: 2")
    assert conf.render() == "arch: amd64\ncores: 2"
    conf.set("memory", "512")
    conf.add_lxc("lxc.cgroup2.devices.allow", "c 195:* rwm")
    assert (
        conf.render()
        == "arch: amd64\ncores: 2\nmemory: 512\nlxc.cgroup2.devices.allow: c 195:* rwm"
    )
    conf.delete("memory")
    conf.remove_lxc(lambda key, value: True)
    assert conf.render() == "arch: amd64\ncores: 2"
    crlf = parse("arch: amd64\r\ncores: 2")
    crlf.set("memory", "512")
    assert crlf.render() == "arch: amd64\r\ncores: 2\r\nmemory: 512"
    crlf.delete("memory")
    assert crlf.render() == "arch: amd64\r\ncores: 2"
    assert parse("").final_newline  # a new file ends in a newline, as PVE writes it


def test_crlf_kept_and_used_for_new_lines() -> None:
    text = "arch: amd64\r\ncores: 2\r\n"
    conf = parse(text)
    assert conf.render() == text
    conf.set("memory", "512")
    assert conf.render() == "arch: amd64\r\ncores: 2\r\nmemory: 512\r\n"


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("Cores", "2", "not a PVE option name"),
        ("lxc.mount.entry", "x", "not a PVE option name"),
        ("cores", "", "non-empty"),
        ("cores", "2\nmemory: 1", "one line"),
    ],
)
def test_bad_set_rejected_and_nothing_changed(key: str, value: str, problem: str) -> None:
    conf = parse(SAMPLE)
    with pytest.raises(PveConfError, match=problem):
        conf.set(key, value)
    assert conf.render() == SAMPLE


def test_bad_raw_key_rejected() -> None:
    conf = parse(SAMPLE)
    with pytest.raises(PveConfError, match=r"start with 'lxc\.'"):
        conf.add_lxc("cgroup2.devices.allow", "c 195:* rwm")
    assert conf.render() == SAMPLE


def test_strict_names_bad_line() -> None:
    text = "arch: amd64\nthis is not a config line\n"
    assert parse(text).render() == text
    with pytest.raises(PveConfError, match="line 2: unable to parse"):
        parse(text, strict=True)
    with pytest.raises(PveConfError, match=r"duplicate section \[a1\]"):
        parse("arch: amd64\n[a1]\ncores: 1\n[a1]\ncores: 2\n", strict=True)


def test_property_strings() -> None:
    props = parse_property_string("/dev/nvidia0,gid=44,mode=0660", default_key="path")
    assert props == {"path": "/dev/nvidia0", "gid": "44", "mode": "0660"}
    assert format_property_string(props, default_key="path") == "/dev/nvidia0,gid=44,mode=0660"
    assert parse_property_string("host=0000:01:00.0;0000:02:00.0,pcie=1", "host") == {
        "host": "0000:01:00.0;0000:02:00.0",
        "pcie": "1",
    }
    with pytest.raises(PveConfError, match="duplicate key"):
        parse_property_string("path=/a,path=/b")


# --- property tests -------------------------------------------------------------------

_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
_value_chars = st.characters(min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters="\n\r")
_value = (
    st.text(alphabet=_value_chars, min_size=1, max_size=30)
    .map(str.strip)
    .filter(bool)
    .filter(lambda v: re.search(r"snapstate:\s*(prepare|delete)\s*$", v) is None)
)
_spaces = st.sampled_from(["", " ", "  ", "\t"])

_pve_key = st.one_of(
    st.sampled_from(["arch", "cores", "memory", "hostname", "rootfs", "ostype", "swap"]),
    st.builds(
        lambda p, n: f"{p}{n}",
        st.sampled_from(["dev", "mp", "hostpci", "net", "unused"]),
        st.integers(0, 255),
    ),
)
# Keys PVE applies (is_valid_lxc_conf_key): known ones and the prefixes it allows.
_lxc_key = st.one_of(
    st.sampled_from(["lxc.mount.entry", "lxc.idmap", "lxc.apparmor.profile", "lxc.cap.drop"]),
    st.builds(
        lambda prefix, parts: prefix + ".".join(parts),
        st.sampled_from(["lxc.cgroup2.", "lxc.cgroup.", "lxc.prlimit.", "lxc.net."]),
        st.lists(
            st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8),
            min_size=1,
            max_size=3,
        ),
    ),
)


@st.composite
def _kv_line(draw: st.DrawFn) -> tuple[str, str, str, str]:
    key = draw(_pve_key)
    value = draw(_value)
    return ("key", key, value, f"{key}:{draw(_spaces)}{value}{draw(_spaces)}\n")


@st.composite
def _lxc_line(draw: st.DrawFn) -> tuple[str, str, str, str]:
    key = draw(_lxc_key)
    value = draw(_value)
    sep = draw(st.sampled_from([": ", ":", " = ", "=", "  =  "]))
    return ("lxc", key, value, f"{key}{sep}{value}\n")


_comment = st.builds(
    lambda t: ("comment", "", t, f"#{t}\n"), st.text(alphabet=_value_chars, max_size=30)
)
_blank = st.builds(lambda s: ("blank", "", "", f"{s}\n"), _spaces)
_line = st.one_of(_kv_line(), _lxc_line(), _comment, _blank)
# PVE's snapshot names: [a-z][a-z0-9_-]+ (two characters at least)
_snapname = st.builds(
    lambda a, b: a + b, _word, st.text(alphabet="abc0123_-", min_size=1, max_size=6)
)


@st.composite
def _conf(draw: st.DrawFn) -> tuple[str, list[tuple[str, str, str, str]], dict[str, list[Any]]]:
    main = draw(st.lists(_line, max_size=25))
    names = draw(st.lists(_snapname, max_size=4, unique=True))
    if draw(st.booleans()):
        names.append("pve:pending")
    text = "".join(raw for *_, raw in main)
    sections: dict[str, list[Any]] = {}
    for name in names:
        body = draw(st.lists(_line, max_size=8))
        sections[name] = body
        text += f"[{name}]\n" + "".join(raw for *_, raw in body)
    if text.endswith("\n") and draw(st.booleans()):
        text = text[:-1]  # no final newline
    return text, main, sections


@settings(max_examples=300, deadline=None)
@given(_conf())
def test_parse_write_lossless_and_faithful(
    case: tuple[str, list[Any], dict[str, list[Any]]],
) -> None:
    text, main, sections = case
    conf = parse(text, strict=True)
    assert conf.render() == text
    # What was written is what is read back.
    want_items: dict[str, str] = {}
    for kind, key, value, _ in main:
        if kind == "key":
            want_items[key] = value
    assert conf.items() == want_items
    assert conf.lxc() == [(k, v) for kind, k, v, _ in main if kind == "lxc"]
    assert [s.name for s in conf.sections[1:]] == list(sections)


@settings(max_examples=200, deadline=None)
@given(_conf(), _pve_key, _value, st.booleans())
def test_main_edits_leave_sections_byte_identical(
    case: tuple[str, list[Any], dict[str, list[Any]]], key: str, value: str, delete: bool
) -> None:
    text, _, sections = case
    conf = parse(text)
    first_header = text.find("\n[") + 1 if sections else len(text)
    if sections and text.startswith("["):
        first_header = 0
    tail = text[first_header:]
    if delete:
        conf.delete(key)
        conf.remove_lxc(lambda k, _v: k.startswith("lxc.c"))
    else:
        conf.set(key, value)
        conf.add_lxc("lxc.cgroup2.devices.allow", "c 195:* rwm")
    out = conf.render()
    assert out.endswith(tail)
    reparsed = parse(out, strict=True)
    assert [s.name for s in reparsed.sections[1:]] == list(sections)
    if delete:
        assert reparsed.get(key) is None
    else:
        assert reparsed.get(key) == value
        assert reparsed.lxc()[-1] == ("lxc.cgroup2.devices.allow", "c 195:* rwm")
