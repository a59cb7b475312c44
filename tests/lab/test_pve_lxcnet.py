"""netN in the lab PVE stand-in: the LXC lines of update_lxc_config and the guest's
/etc/network/interfaces of PVE's Debian setup (run over PVE's own test cases)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specops_lab.pve.lxcnet import NetError, lxc_net_lines, render_interfaces, setup_network

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "pve-container-setup"


def _conf(text: str) -> dict[str, str]:
    items = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            items[key.strip()] = value.strip()
    return items


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.is_dir()))
def test_debian_setup_writes_what_pve_writes(case: str) -> None:
    d = CASES / case
    conf = {"ostype": "debian", **_conf((d / "config").read_text())}
    existing = (d / "interfaces").read_text() if (d / "interfaces").is_file() else None
    version = int(re.match(r"\d+", (d / "debian_version").read_text())[0])  # type: ignore[index]
    got = render_interfaces(conf, existing, ostype="debian", version=version)
    assert got == (d / "interfaces.exp").read_text()
    # PVE runs its setup twice in its tests: a second start changes nothing.
    assert render_interfaces(conf, got, ostype="debian", version=version) == got


def test_setup_network_writes_the_lab_containers_interfaces(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/debian_version").write_text("12.12\n")
    conf = {"ostype": "debian", "net0": "name=eth0,bridge=vmbr0,ip=10.216.3.33/22,gw=10.216.0.1"}
    assert setup_network(tmp_path, conf) is True
    assert (tmp_path / "etc/network/interfaces").read_text() == (
        "auto lo\niface lo inet loopback\niface lo inet6 loopback\n\n"
        "auto eth0\niface eth0 inet static\n\taddress 10.216.3.33/22\n\tgateway 10.216.0.1\n\n"
    )
    assert setup_network(tmp_path, conf) is False, "a restart changes nothing"
    assert setup_network(tmp_path, {"ostype": "debian"}) is False, "no netN: file left alone"


def _bridge(tmp_path: Path, name: str = "vmbr0", mtu: int = 1500) -> Path:
    (tmp_path / name).mkdir(parents=True)
    (tmp_path / name / "mtu").write_text(f"{mtu}\n")
    return tmp_path


def test_lxc_lines_follow_update_lxc_config(tmp_path: Path) -> None:
    sys_net = _bridge(tmp_path)
    items = {
        "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=10.216.3.33/22,gw=10.216.0.1",
        "net1": "name=eth1,bridge=vmbr0,ip=10.216.3.34/22,host-managed=1,mtu=1400",
    }
    lines = lxc_net_lines(items, 801, sys_class_net=sys_net)
    assert lines[:7] == [
        "lxc.net.0.type = veth",
        "lxc.net.0.veth.pair = veth801i0",
        "lxc.net.0.hwaddr = BC:24:11:AA:BB:CC",
        "lxc.net.0.name = eth0",
        "lxc.net.0.mtu = 1500",
        "lxc.net.0.link = vmbr0",
        "lxc.net.1.type = veth",
    ]
    # No host-managed: the guest's setup configures eth0, LXC does not.
    assert not any(ln.startswith("lxc.net.0.ipv4") for ln in lines)
    assert re.fullmatch(r"lxc\.net\.1\.hwaddr = BC:24:11(:[0-9A-F]{2}){3}", lines[8])
    assert lines[-4:] == [
        "lxc.net.1.mtu = 1400",
        "lxc.net.1.link = vmbr0",
        "lxc.net.1.ipv4.address = 10.216.3.34/22",
        "lxc.net.1.flags = up",
    ]
    assert lxc_net_lines({"hostname": "x"}, 801, sys_class_net=sys_net) == []


@pytest.mark.parametrize(
    ("net0", "says"),
    [
        ("name=eth0,bridge=vmbr9,ip=dhcp", "bridge 'vmbr9' does not exist"),
        (
            "name=eth0,bridge=vmbr0,mtu=9000",
            "net0: MTU size '9000' is bigger than bridge MTU '1500'",
        ),
        ("name=eth0,ip=dhcp", "net0: missing bridge configuration"),
        ("name=eth0,bridge=vmbr0,tag=20", "net0: tag not emulated"),
        ("name=eth0,bridge=vmbr0,ip6=auto,host-managed=1", "SLAAC is not supported"),
        ("name=eth0,bridge", "unable to parse net0"),
    ],
)
def test_lxc_lines_refuse_with_pves_words(tmp_path: Path, net0: str, says: str) -> None:
    with pytest.raises(NetError, match=re.escape(says)):
        lxc_net_lines({"net0": net0}, 801, sys_class_net=_bridge(tmp_path))
