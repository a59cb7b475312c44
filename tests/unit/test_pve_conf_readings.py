"""What PVE derives from a container's options, read by ``pve_conf`` as PVE reads it:
booleans (pve-common ``check_type``), the id map (pve-container ``PVE::LXC::
parse_id_maps``) and whether the container runs in a user namespace (``PVE::LXC::
update_lxc_config``). The rules are listed in ../shared/pve-fixtures/README.md."""

from __future__ import annotations

import pytest
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import (
    DEFAULT_ID_MAP,
    PveConfError,
    parse,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", True), ("yes", True), ("on", True), ("true", True), ("YES", True), ("True", True),
        ("0", False), ("no", False), ("off", False), ("false", False), ("OFF", False),
    ],
)  # fmt: skip
def test_booleans_in_every_spelling(value: str, expected: bool) -> None:
    conf = parse(f"arch: amd64\nunprivileged: {value}\n")
    assert conf.get_bool("unprivileged") is expected
    assert conf.get_bool("unprivileged", default=not expected) is expected


def test_a_later_line_replaces_only_when_pve_can_read_it() -> None:
    assert parse("onboot: 1\nonboot: 0\n").get_bool("onboot") is False
    # check_type refuses "maybe": PVE warns, drops that line and keeps the earlier value.
    assert parse("onboot: 1\nonboot: maybe\n").get_bool("onboot") is True
    assert parse("onboot: maybe\n").get_bool("onboot", default=True) is True
    assert parse("[snap]\nonboot: 1\n").get_bool("onboot") is False  # main section only


def test_id_map_as_pve_applies_it() -> None:
    # An unprivileged container without lxc.idmap lines gets PVE's default map.
    assert parse("unprivileged: 1\n").id_map() == list(DEFAULT_ID_MAP)
    assert parse("unprivileged: yes\n").id_map() == [
        ("u", 0, 100000, 65536),
        ("g", 0, 100000, 65536),
    ]
    assert parse("arch: amd64\n").id_map() == []  # privileged: host ids
    custom = parse(
        "unprivileged: 1\nlxc.idmap: u 0 100000 65536\nlxc.idmap = g 0 100000 44\n"
        "lxc.idmap: g 44 44 1\nlxc.idmap: g 45 100045 65491\n\n[snap]\nlxc.idmap: u 0 0 1\n"
    )
    assert custom.id_map() == [
        ("u", 0, 100000, 65536),
        ("g", 0, 100000, 44),
        ("g", 44, 44, 1),
        ("g", 45, 100045, 65491),
    ]
    with pytest.raises(PveConfError, match=r"^lxc\.idmap: failed to parse idmap: 'g 0 100000'"):
        parse("unprivileged: 1\nlxc.idmap: g 0 100000\n").id_map()


def test_user_namespace_from_the_flag_or_any_idmap_line() -> None:
    assert parse("unprivileged: on\n").user_namespace
    assert parse("arch: amd64\nlxc.idmap: u 0 100000 65536\n").user_namespace
    assert not parse("arch: amd64\nunprivileged: 0\n").user_namespace
    assert not parse("arch: amd64\n\n[snap]\nunprivileged: 1\n").user_namespace
