"""The lab network's one definition and the checks `specops lab up` makes before it
touches this machine (light: the commands are recorded, not run)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from specops.errors import ValidationError
from specops_lab import network
from specops_lab.network import ALIAS, LabNetwork, conflicts, ensure_down, ensure_up

NET = LabNetwork("vmbr0", ipaddress.IPv4Network("10.216.0.0/22"))
HERE_ADDRS = [
    {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
    {"ifname": "eth0", "addr_info": [{"family": "inet", "local": "192.0.2.2", "prefixlen": 24}]},
    {
        "ifname": "docker0",
        "addr_info": [{"family": "inet", "local": "172.17.0.1", "prefixlen": 16}],
    },
]
HERE_ROUTES = [
    {"dst": "default", "gateway": "192.0.2.1", "dev": "eth0"},
    {"dst": "172.17.0.0/16", "dev": "docker0"},
    {"dst": "192.0.2.0/24", "dev": "eth0"},
]


def test_the_definition_gives_every_lab_address() -> None:
    net = network.load()
    assert net.gateway == net.subnet.network_address + 1
    assert net.address(801) == net.subnet.network_address + 801
    assert net.address(801) in net.subnet
    with pytest.raises(ValidationError, match="vmid: 5000 has no address"):
        net.address(5000)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"bridge": "vmbr0", "subnet": "10.216.0.1/22"}, "subnet"),  # host bits
        ({"bridge": "vmbr0", "subnet": "8.8.0.0/16"}, "subnet"),  # not private
        ({"bridge": "vmbr0", "subnet": "10.216.0.0/28"}, "subnet"),  # no room for vmids
        ({"bridge": "a-bridge-name-too-long", "subnet": "10.216.0.0/22"}, "bridge"),
        ("10.216.0.0/22", "specops_lab_network"),
    ],
)
def test_bad_definitions_name_the_field(data: object, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        LabNetwork.from_mapping(data)
    assert field in err.value.field


def test_a_definition_that_does_not_parse_names_its_file_and_line(tmp_path: Path) -> None:
    """Issue 36: a YAML syntax error in the lab inventory's group_vars was a traceback."""
    broken = tmp_path / "lab.yml"
    broken.write_text("specops_lab_network:\n  bridge: [vmbr0\n  subnet: 10.216.0.0/22\n")
    with pytest.raises(ValidationError) as err:
        network.load(broken)
    assert str(err.value).startswith(f"specops_lab_network: {broken}: line 3, column ")


def test_a_free_subnet_has_no_conflicts_here() -> None:
    assert conflicts(NET, HERE_ADDRS, HERE_ROUTES, ["10.255.255.53"]) == []


def test_used_subnets_are_named_before_anything_changes() -> None:
    addrs = [*HERE_ADDRS, {"ifname": "wg0", "addr_info": [
        {"family": "inet", "local": "10.216.1.7", "prefixlen": 24}]}]  # fmt: skip
    routes = [*HERE_ROUTES, {"dst": "10.0.0.0/8", "dev": "tun0"}]
    found = conflicts(NET, addrs, routes, ["10.216.2.53"])
    assert found == [
        "interface wg0 has 10.216.1.7/24 (inside or around 10.216.0.0/22)",
        "route to 10.0.0.0/8 via tun0 overlaps 10.216.0.0/22",
        "resolver 10.216.2.53 is inside 10.216.0.0/22",
    ]
    # The lab's own bridge and its route are not conflicts.
    ours = {"ifname": "vmbr0", "ifalias": ALIAS, "addr_info": [
        {"family": "inet", "local": "10.216.0.1", "prefixlen": 22}]}  # fmt: skip
    assert (
        conflicts(
            NET, [*HERE_ADDRS, ours], [*HERE_ROUTES, {"dst": "10.216.0.0/22", "dev": "vmbr0"}]
        )
        == []
    )


class FakeHost:
    """Answers `ip` and `iptables` as this machine would, recording changes."""

    def __init__(self, links: list[dict[str, object]], rules: set[str] | None = None) -> None:
        self.links = links
        self.rules = rules or set()
        self.chains = {"DOCKER-USER"}
        self.changes: list[str] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        args = list(argv)
        out, rc = "", 0
        if args[:3] == ["ip", "-j", "-d"]:
            out = json.dumps(self.links)
        elif args[:3] == ["ip", "-j", "route"]:
            out = json.dumps(HERE_ROUTES)
        elif args[:2] == ["iptables", "-w"]:
            rest = args[2:]
            table = rest[1] if rest[0] == "-t" else "filter"
            rest = rest[2:] if rest[0] == "-t" else rest
            key = f"{table} {' '.join(rest[1:])}"
            if rest[0] == "-C":
                rc = 0 if key in self.rules else 1
            elif rest[:2] == ["-n", "-L"]:
                rc = 0 if rest[2] in self.chains else 1
            elif rest[0] == "-N":
                self.chains.add(rest[1])
            elif rest[0] in ("-A", "-I"):
                rule = [r for r in rest[1:] if r != "1"] if rest[0] == "-I" else rest[1:]
                self.rules.add(f"{table} {' '.join(rule)}")
            elif rest[0] == "-D":
                self.rules.discard(key)
            elif rest[0] == "-F":
                self.rules = {r for r in self.rules if not r.startswith(f"{table} {rest[1]} ")}
            elif rest[0] == "-X":
                self.chains.discard(rest[1])
            if rest[0] not in ("-C", "-n"):
                self.changes.append(" ".join(args))
        else:
            self.changes.append(" ".join(args))
        return subprocess.CompletedProcess(args, rc, out, "")


def test_up_makes_bridge_and_rules_once_and_down_removes_them(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.255.255.53\n")
    host = FakeHost(list(HERE_ADDRS))
    said: list[str] = []
    ensure_up(NET, said.append, run=host, resolv_conf=resolv)
    made = host.changes[:]
    assert "ip link add vmbr0 type bridge" in made
    assert "ip addr add 10.216.0.1/22 dev vmbr0" in made
    assert "filter DOCKER-USER -j SPECOPS-LAB" in host.rules
    assert "nat POSTROUTING -s 10.216.0.0/22 ! -o vmbr0 -j MASQUERADE" in host.rules
    # A second run (the bridge now there, marked) adds no rule and no address.
    host.links.append({"ifname": "vmbr0", "ifalias": ALIAS, "addr_info": [
        {"family": "inet", "local": "10.216.0.1", "prefixlen": 22}]})  # fmt: skip
    host.changes.clear()
    ensure_up(NET, said.append, run=host, resolv_conf=resolv)
    assert host.changes == ["ip link set vmbr0 up"]
    ensure_down(NET, said.append, run=host)
    assert not any("SPECOPS-LAB" in r or "MASQUERADE" in r for r in host.rules)
    assert "ip link del vmbr0" in host.changes


def test_up_refuses_a_foreign_bridge_and_a_used_subnet(tmp_path: Path) -> None:
    foreign = FakeHost([*HERE_ADDRS, {"ifname": "vmbr0", "addr_info": []}])
    with pytest.raises(ValidationError, match="interface vmbr0 exists and is not the lab's"):
        ensure_up(NET, print, run=foreign, resolv_conf=tmp_path / "none")
    used = FakeHost([*HERE_ADDRS, {"ifname": "wg0", "addr_info": [
        {"family": "inet", "local": "10.216.1.7", "prefixlen": 24}]}])  # fmt: skip
    with pytest.raises(ValidationError, match=r"10\.216\.0\.0/22 is in use on this machine"):
        ensure_up(NET, print, run=used, resolv_conf=tmp_path / "none")
    assert foreign.changes == [], "nothing changed"
    assert used.changes == [], "nothing changed"
