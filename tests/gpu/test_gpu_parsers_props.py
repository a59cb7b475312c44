"""Property tests for the hostpci and /proc/devices parsers."""

from __future__ import annotations

from ansible_collections.specops.infra.plugins.module_utils import gpu
from hypothesis import given
from hypothesis import strategies as st

hexdig = st.sampled_from("0123456789abcdef")
addresses = st.builds(
    gpu.PciAddress,
    domain=st.text(hexdig, min_size=4, max_size=4),
    bus=st.text(hexdig, min_size=2, max_size=2),
    device=st.text(hexdig, min_size=2, max_size=2),
    function=st.one_of(st.none(), st.integers(0, 15)),
)
_booleans = st.sampled_from(["1", "0", "on", "off", "yes", "no", "true", "false", "TRUE"])
_names = st.text(st.sampled_from("abc01-_"), min_size=1, max_size=6)
options = st.fixed_dictionaries(
    {},
    optional={
        "pcie": _booleans,
        "x-vga": _booleans,
        "rombar": _booleans,
        "romfile": _names,
        "mdev": _names,
        "driver": st.sampled_from(["vfio", "keep"]),
        "vendor-id": st.from_regex(r"0x[0-9a-fA-F]{4}", fullmatch=True),
    },
)


@given(
    st.lists(addresses, min_size=1, max_size=4),
    options,
    st.booleans(),
    st.integers(0, 4),
    st.lists(st.sampled_from(["", " ", "\t"]), max_size=3),
)
def test_host_lists_round_trip(
    hosts: list[gpu.PciAddress],
    opts: dict[str, str],
    bare: bool,
    position: int,
    blanks: list[str],
) -> None:
    """PVE's property-string grammar: the bare host may stand anywhere, empty items are
    skipped (``01:00.0,``, ``01:00.0,,pcie=1``, ``pcie=1,01:00.0`` all read the same)."""
    host = ";".join(str(h) for h in hosts)
    items = [f"{k}={v}" for k, v in opts.items()]
    items.insert(min(position, len(items)), host if bare else f"host={host}")
    value = ",".join(items + blanks)
    parsed, mapping, rest = gpu.parse_hostpci_value(value)
    assert list(parsed) == hosts
    assert mapping is None
    assert rest == opts


_first = st.one_of(
    st.lists(addresses, min_size=1, max_size=3).map(
        lambda hs: "host=" + ";".join(str(h) for h in hs)
    ),
    st.lists(addresses, min_size=1, max_size=2).map(lambda hs: ";".join(str(h) for h in hs)),
    st.from_regex(r"mapping=[a-z][a-z0-9_-]{0,8}", fullmatch=True),
    st.from_regex(r"mapping=[A-Z0-9_]{0,4}", fullmatch=True),
)
_rest = st.sampled_from(
    ["pcie=1", "x-vga=1", "rombar=0", "mdev=nvidia-1", "host=", "", "=", "0000:01:00.0"]
)
# Values near the grammar (a valid entry, then options, some of them broken) and
# arbitrary text: both branches of the property below are exercised.
_pieces = st.builds(
    lambda first, rest: ",".join([first, *rest]), _first, st.lists(_rest, max_size=3)
)


@given(st.one_of(_pieces, st.text(max_size=40)))
def test_any_value_parses_or_says_why(value: str) -> None:
    """Any text either parses into a consistent entry or is refused with a ValueError
    that says why (any other exception type propagates and fails the test)."""
    try:
        addresses, mapping, options = gpu.parse_hostpci_value(value)
    except ValueError as exc:
        refusal = str(exc)
        assert refusal.strip(), f"refusal of {value!r} without a reason"
        return
    # Parsed: exactly one of host addresses / mapping id, and every address and option
    # comes from the input text.
    assert bool(addresses) != (mapping is not None), (value, addresses, mapping)
    assert mapping is None or f"mapping={mapping}" in value
    assert "host" not in options
    assert "mapping" not in options
    for key, val in options.items():
        assert f"{key}={val}" in value.replace(" ", "") or key in value
    for address in addresses:
        assert f"{address.bus}:{address.device}" in value.lower()


@given(st.dictionaries(st.from_regex(r"nvidia[a-z-]{0,12}", fullmatch=True), st.integers(1, 511)))
def test_proc_devices_round_trip(majors: dict[str, int]) -> None:
    text = "Character devices:\n" + "".join(f"{m:3d} {n}\n" for n, m in majors.items())
    text += "\nBlock devices:\n  8 sd\n259 blkext\n"
    assert gpu.parse_proc_devices(text) == majors
