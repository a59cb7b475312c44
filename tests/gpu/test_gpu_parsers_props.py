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
    function=st.one_of(st.none(), st.integers(0, 7)),
)
options = st.dictionaries(
    st.sampled_from(["pcie", "x-vga", "rombar", "romfile", "mdev"]),
    st.text(st.sampled_from("abc01"), min_size=1, max_size=4),
    max_size=3,
)


@given(st.lists(addresses, min_size=1, max_size=4), options, st.booleans())
def test_host_lists_round_trip(
    hosts: list[gpu.PciAddress], opts: dict[str, str], bare: bool
) -> None:
    host = ";".join(str(h) for h in hosts)
    value = ",".join([host if bare else f"host={host}"] + [f"{k}={v}" for k, v in opts.items()])
    parsed, mapping, rest = gpu.parse_hostpci_value(value)
    assert list(parsed) == hosts
    assert mapping is None
    assert rest == opts


@given(st.text(max_size=40))
def test_any_value_parses_or_says_why(value: str) -> None:
    try:
        gpu.parse_hostpci_value(value)
    except ValueError as exc:
        message = str(exc)
    else:
        message = "parsed"
    assert message  # never another exception type, never an empty message


@given(st.dictionaries(st.from_regex(r"nvidia[a-z-]{0,12}", fullmatch=True), st.integers(1, 511)))
def test_proc_devices_round_trip(majors: dict[str, int]) -> None:
    text = "Character devices:\n" + "".join(f"{m:3d} {n}\n" for n, m in majors.items())
    text += "\nBlock devices:\n  8 sd\n259 blkext\n"
    assert gpu.parse_proc_devices(text) == majors
