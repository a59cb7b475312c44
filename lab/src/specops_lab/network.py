"""The lab's container network: one bridge on this machine, one subnet (a stand-in for
the PVE nodes' ``vmbr0``).

Lab containers get their own network as on PVE: ``netN: name=eth0,bridge=vmbr0,
ip=<address>/<prefix>,gw=<bridge address>`` in their conf, a veth pair plugged into the
bridge by the PVE stand-in (``specops_lab.pve.lxcconf``), the address written into the
container by PVE's guest setup. The controller reaches a container at its inventory
address through the bridge; containers reach the package registries through NAT.

One definition: ``specops_lab_network`` in ``inventory/lab/group_vars/all/lab.yml``
(``bridge``, ``subnet``). Every lab address derives from it: the bridge holds the
subnet's first address (the containers' gateway), a container's address is the
subnet's ``<vmid>``-th address (vmids are unique in the fleet, so addresses are too).

``specops lab up`` (:func:`ensure_up`) refuses a subnet that an interface, a route or a
resolver of this machine already uses, then creates the bridge (marked with the alias
``specops-lab``), lets its traffic through docker's FORWARD policy (DROP here) in
``DOCKER-USER`` and masquerades the subnet. ``specops lab down --destroy``
(:func:`ensure_down`) removes them again. Nothing else on this machine is touched.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specops.errors import SpecopsError, ValidationError, syntax_problem

__all__ = [
    "ALIAS",
    "DEFINITION",
    "LabNetwork",
    "conflicts",
    "ensure_down",
    "ensure_up",
    "load",
    "resolvers",
]

REPO_ROOT = Path(__file__).resolve().parents[3]
# The one home of the lab's network: the lab inventory's overlay for group all.
DEFINITION = REPO_ROOT / "inventory" / "lab" / "group_vars" / "all" / "lab.yml"
KEY = "specops_lab_network"
ALIAS = "specops-lab"  # ip link alias that marks the bridge as the lab's own
FILTER_CHAIN = "SPECOPS-LAB"
_IFNAME_MAX = 15

Run = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]
Say = Callable[[str], None]


@dataclass(frozen=True)
class LabNetwork:
    """The lab bridge and its subnet."""

    bridge: str
    subnet: ipaddress.IPv4Network

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        """The bridge's own address: the subnet's first."""
        return self.subnet.network_address + 1

    def address(self, vmid: int) -> ipaddress.IPv4Address:
        """A lab container's address: the subnet's ``vmid``-th."""
        last = self.subnet.num_addresses - 2
        if not 2 <= vmid <= last:
            raise ValidationError(
                "vmid", f"{vmid} has no address in {self.subnet} (lab containers: vmid 2..{last})"
            )
        return self.subnet.network_address + vmid

    @classmethod
    def from_mapping(cls, data: Any, where: str = KEY) -> LabNetwork:
        if not isinstance(data, Mapping):
            raise ValidationError(where, f"must be a mapping with bridge and subnet (got {data!r})")
        bridge = str(data.get("bridge") or "")
        if not bridge or len(bridge) > _IFNAME_MAX or not bridge.replace("-", "").isalnum():
            raise ValidationError(
                f"{where}.bridge",
                f"must be an interface name of 1-15 letters/digits (got {bridge!r})",
            )
        try:
            subnet = ipaddress.IPv4Network(str(data.get("subnet") or ""), strict=True)
        except ValueError as exc:
            raise ValidationError(
                f"{where}.subnet", f"must be an IPv4 network like 10.216.0.0/22 ({exc})"
            ) from None
        if subnet.prefixlen > 24 or not subnet.is_private:
            raise ValidationError(
                f"{where}.subnet",
                f"must be a private network of /24 or larger, room for the vmids (got {subnet})",
            )
        return cls(bridge=bridge, subnet=subnet)


def load(path: Path = DEFINITION) -> LabNetwork:
    """The lab's network from its one definition (``specops_lab_network`` in ``path``)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ValidationError(KEY, f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ValidationError(KEY, f"{path}: {syntax_problem(exc)}") from None
    if KEY not in data:
        raise ValidationError(KEY, f"is not set in {path}")
    return LabNetwork.from_mapping(data[KEY], f"{path.name}: {KEY}")


def resolvers(text: str) -> list[str]:
    """The ``nameserver`` addresses of a resolv.conf text."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            out.append(parts[1])
    return out


def conflicts(
    net: LabNetwork,
    addresses: Iterable[Mapping[str, Any]],
    routes: Iterable[Mapping[str, Any]],
    nameservers: Iterable[str] = (),
) -> list[str]:
    """What on this machine already uses the lab subnet: interface addresses
    (``ip -j addr`` entries), routes (``ip -j route``) and resolvers, each one line.
    The lab's own bridge is not a conflict; the default route is not either."""
    found: list[str] = []
    for link in addresses:
        name = str(link.get("ifname", "?"))
        if name == net.bridge and link.get("ifalias") == ALIAS:
            continue
        for info in link.get("addr_info") or []:
            if info.get("family") != "inet":
                continue
            iface = ipaddress.IPv4Interface(f"{info['local']}/{info.get('prefixlen', 32)}")
            if iface.network.overlaps(net.subnet):
                found.append(f"interface {name} has {iface} (inside or around {net.subnet})")
    for route in routes:
        dst = str(route.get("dst", ""))
        if dst in ("", "default") or route.get("dev") == net.bridge:
            continue
        try:
            network = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if network.version == 4 and network.overlaps(net.subnet):
            found.append(f"route to {dst} via {route.get('dev', '?')} overlaps {net.subnet}")
    for server in nameservers:
        try:
            if ipaddress.ip_address(server) in net.subnet:
                found.append(f"resolver {server} is inside {net.subnet}")
        except ValueError:
            continue
    return found


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=30)


def _must(run: Run, argv: Sequence[str]) -> str:
    proc = run(argv)
    if proc.returncode != 0:
        raise SpecopsError(f"lab network: {' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc.stdout


def _links(run: Run) -> list[dict[str, Any]]:
    data = json.loads(_must(run, ["ip", "-j", "-d", "addr", "show"]) or "[]")
    return [d for d in data if isinstance(d, dict)]


def _bridge(links: Iterable[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((d for d in links if d.get("ifname") == name), None)


def _ipt(run: Run, table: str, *rule: str) -> bool:
    """Whether an iptables rule (``-C`` form) exists."""
    return run(["iptables", "-w", "-t", table, "-C", *rule]).returncode == 0


def _filter_rules(net: LabNetwork) -> list[list[str]]:
    return [
        [FILTER_CHAIN, "-i", net.bridge, "-j", "ACCEPT"],
        [FILTER_CHAIN, "-o", net.bridge, "-m", "conntrack", "--ctstate",
         "RELATED,ESTABLISHED", "-j", "ACCEPT"],
    ]  # fmt: skip


def _nat_rule(net: LabNetwork) -> list[str]:
    return ["POSTROUTING", "-s", str(net.subnet), "!", "-o", net.bridge, "-j", "MASQUERADE"]


def _parent_chain(run: Run) -> str:
    """Where to hook the lab's filter chain: docker's DOCKER-USER (first in FORWARD,
    kept across docker restarts) when there is one, else FORWARD itself."""
    return (
        "DOCKER-USER"
        if run(["iptables", "-w", "-n", "-L", "DOCKER-USER"]).returncode == 0
        else "FORWARD"
    )


def ensure_up(
    net: LabNetwork,
    say: Say,
    *,
    run: Run = _run,
    resolv_conf: Path = Path("/etc/resolv.conf"),
) -> None:
    """Create the bridge, its address and the forwarding/NAT rules (idempotent).
    Refuses, before changing anything, a subnet this machine already uses or a bridge
    name taken by an interface that is not the lab's."""
    links = _links(run)
    existing = _bridge(links, net.bridge)
    if existing is not None and existing.get("ifalias") != ALIAS:
        raise ValidationError(
            f"{KEY}.bridge",
            f"interface {net.bridge} exists and is not the lab's (no alias {ALIAS}); "
            "pick another bridge name in the lab network definition",
        )
    routes = json.loads(_must(run, ["ip", "-j", "route", "show"]) or "[]")
    servers = resolvers(resolv_conf.read_text()) if resolv_conf.is_file() else []
    found = conflicts(net, links, routes, servers)
    if found:
        raise ValidationError(
            f"{KEY}.subnet",
            f"{net.subnet} is in use on this machine: {'; '.join(found)}; pick a free "
            f"subnet in {DEFINITION}",
        )
    gw = f"{net.gateway}/{net.subnet.prefixlen}"
    if existing is None:
        _must(run, ["ip", "link", "add", net.bridge, "type", "bridge"])
        _must(run, ["ip", "link", "set", net.bridge, "alias", ALIAS])
        say(f"network: bridge {net.bridge} created")
    have = {
        f"{i['local']}/{i['prefixlen']}"
        for i in (existing or {}).get("addr_info") or []
        if i.get("family") == "inet"
    }
    if gw not in have:
        _must(run, ["ip", "addr", "add", gw, "dev", net.bridge])
        say(f"network: {net.bridge} has {gw} (the containers' gateway)")
    _must(run, ["ip", "link", "set", net.bridge, "up"])
    forward = Path("/proc/sys/net/ipv4/ip_forward")
    if forward.is_file() and forward.read_text().strip() != "1":
        _must(run, ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
        say("network: IPv4 forwarding on (containers reach the registries through NAT)")
    if run(["iptables", "-w", "-n", "-L", FILTER_CHAIN]).returncode != 0:
        _must(run, ["iptables", "-w", "-N", FILTER_CHAIN])
    for rule in _filter_rules(net):
        if not _ipt(run, "filter", *rule):
            _must(run, ["iptables", "-w", "-A", *rule])
    parent = _parent_chain(run)
    if not _ipt(run, "filter", parent, "-j", FILTER_CHAIN):
        _must(run, ["iptables", "-w", "-I", parent, "1", "-j", FILTER_CHAIN])
        say(f"network: {net.bridge} traffic accepted ({parent} -> {FILTER_CHAIN})")
    if not _ipt(run, "nat", *_nat_rule(net)):
        _must(run, ["iptables", "-w", "-t", "nat", "-A", *_nat_rule(net)])
        say(f"network: {net.subnet} masqueraded for the registries")


def ensure_down(net: LabNetwork, say: Say, *, run: Run = _run) -> None:
    """Remove what :func:`ensure_up` made; an interface that is not the lab's stays."""
    for parent in ("DOCKER-USER", "FORWARD"):
        while _ipt(run, "filter", parent, "-j", FILTER_CHAIN):
            _must(run, ["iptables", "-w", "-D", parent, "-j", FILTER_CHAIN])
    if run(["iptables", "-w", "-n", "-L", FILTER_CHAIN]).returncode == 0:
        _must(run, ["iptables", "-w", "-F", FILTER_CHAIN])
        _must(run, ["iptables", "-w", "-X", FILTER_CHAIN])
    while _ipt(run, "nat", *_nat_rule(net)):
        _must(run, ["iptables", "-w", "-t", "nat", "-D", *_nat_rule(net)])
    existing = _bridge(_links(run), net.bridge)
    if existing is not None and existing.get("ifalias") == ALIAS:
        _must(run, ["ip", "link", "del", net.bridge])
        say(f"network: bridge {net.bridge} removed")
