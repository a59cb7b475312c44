"""A container's ``netN`` network, as PVE sets it up at each start (lab stand-in).

Two parts, each following pve-container's code:

1. The LXC side, :func:`lxc_net_lines`: ``PVE::LXC::update_lxc_config``'s ``netN``
   loop (``src/PVE/LXC.pm``) writes ``lxc.net.N.type = veth``, ``veth.pair =
   veth<vmid>i<N>``, ``hwaddr`` (``parse_lxc_network`` makes a random ``BC:24:11``
   one when the conf has none), ``name``, ``mtu`` (the bridge's, read from
   ``/sys/class/net/<bridge>/mtu``: "bridge '<bridge>' does not exist" without it; a
   larger ``mtu=`` is refused), the up-script ``/usr/share/lxc/lxcnetaddbr`` and, for
   ``host-managed=1`` interfaces only, the addresses and ``flags = up``. lxcnetaddbr
   (``src/lxcnetaddbr``) then plugs the host end into the bridge
   (``PVE::LXC::net_tap_plug``); the lab has no PVE perl, so the stand-in names the
   bridge as ``lxc.net.N.link`` instead, which makes LXC plug it the same way. A lab
   node's bridges are this machine's (the lab bridge, ``specops_lab.network``): every
   node of the lab cluster shares one L2 segment, as PVE nodes on one ``vmbr0`` do.
   VLAN tags, trunks, rate limits and the PVE firewall (``fwbr``) are not emulated
   (refused, named).

2. The guest side. At every start PVE's ``PVE::LXC::Setup::Debian::setup_network`` (pve-container,
``src/PVE/LXC/Setup/Debian.pm``) rewrites the container's ``/etc/network/interfaces``
from its ``netN`` entries (``name``, ``ip``/``gw``, ``ip6``/``gw6``): sections of the
named interfaces are replaced (their other attributes kept, PVE's own gateway-route
block between ``# --- BEGIN PVE ---`` / ``# --- END PVE ---`` markers renewed), every
other line is kept, missing sections are appended, and loopback is added when the file
does not bring ``lo`` up. ifupdown in the container applies the file when it boots.
This module follows that function line by line (``render_interfaces``); the PVE
stand-in calls :func:`setup_network` before each start. PVE's own test cases
(``src/test/test-debian-*``) are the fixtures of its tests.

Lab scope: Debian containers (the lab's template is Debian 12, with ifupdown as PVE's
debian-12-standard template has it); other distributions' setups (networkd,
NetworkManager, ...) are not emulated.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specops.errors import SpecopsError

__all__ = ["NetError", "interfaces_path", "lxc_net_lines", "render_interfaces", "setup_network"]

SYS_CLASS_NET = Path("/sys/class/net")
MAC_PREFIX = "BC:24:11"  # datacenter.cfg's default mac_prefix (PVE 8)
LXCNETADDBR = "/usr/share/lxc/lxcnetaddbr"
_NOT_EMULATED = ("tag", "trunks", "rate", "firewall")

_BEGIN = "# --- BEGIN PVE ---"
_END = "# --- END PVE ---"
_GW_ROUTE = re.compile(r"^\s*post-up\s+ip\s+route\s+add\s+(\S+)\s+dev\s+(\S+)$")
_GW_DEFAULT = re.compile(r"^\s*post-up\s+ip\s+route\s+add\s+default\s+via\s+(\S+)\s+dev\s+(\S+)$")
_GW_DEL_DEFAULT = re.compile(
    r"^\s*pre-down\s+ip\s+route\s+del\s+default\s+via\s+(\S+)\s+dev\s+(\S+)$"
)
_GW_DEL = re.compile(r"^\s*pre-down\s+ip\s+route\s+del\s+(\S+)\s+dev\s+(\S+)$")


class NetError(SpecopsError):
    """PVE refuses this network configuration (its wording)."""


@dataclass
class _Net:
    address: str | None = None
    netmask: str | None = None
    cidr: str | None = None
    gateway: str | None = None
    needsroute: bool = False
    address6: str | None = None
    netmask6: str | None = None
    cidr6: str | None = None
    gateway6: str | None = None
    needsroute6: bool = False


@dataclass
class _Section:
    type: str  # ipv4 | ipv6
    ifname: str
    attr: list[str] = field(default_factory=list)


def net_props(key: str, value: str) -> dict[str, str]:
    """A ``netN`` property string (``name=eth0,bridge=vmbr0,...``; no default key)."""
    out: dict[str, str] = {}
    for part in value.split(","):
        if not part:
            continue
        k, sep, v = part.partition("=")
        if not sep or not k or not v:
            raise NetError(f"unable to parse {key}: invalid format - {part!r} is not key=value")
        if k in out:
            raise NetError(
                f"unable to parse {key}: duplicate key in comma-separated list property: {k}"
            )
        out[k] = v
    return out


def _random_hwaddr() -> str:
    """``PVE::Tools::random_ether_addr`` with the default prefix (locally administered)."""
    return MAC_PREFIX + "".join(f":{b:02X}" for b in secrets.token_bytes(3))


def _net_keys(items: Mapping[str, str]) -> list[tuple[int, str]]:
    """``sort keys %$conf`` restricted to ``netN``: Perl's string order (net10 < net2)."""
    return [(int(k[3:]), k) for k in sorted(items) if re.fullmatch(r"net\d+", k)]


def lxc_net_lines(  # noqa: PLR0912  (update_lxc_config's netN loop, in its order)
    items: Mapping[str, str], vmid: int, *, sys_class_net: Path = SYS_CLASS_NET
) -> list[str]:
    """The ``lxc.net.*`` lines of ``update_lxc_config`` for the conf's ``netN`` entries
    (empty when there is none). Raises :class:`NetError` with PVE's wording."""
    lines: list[str] = []
    for ind, key in _net_keys(items):
        d = net_props(key, items[key])
        bad = [k for k in _NOT_EMULATED if k in d and not (k == "firewall" and d[k] in ("0", ""))]
        if bad:
            raise NetError(f"{key}: {', '.join(bad)} not emulated by the lab PVE stand-in")
        bridge = d.get("bridge")
        if not bridge:
            raise NetError(f"{key}: missing bridge configuration")
        lines.append(f"lxc.net.{ind}.type = veth")
        lines.append(f"lxc.net.{ind}.veth.pair = veth{vmid}i{ind}")
        lines.append(f"lxc.net.{ind}.hwaddr = {d.get('hwaddr') or _random_hwaddr()}")
        if d.get("name"):
            lines.append(f"lxc.net.{ind}.name = {d['name']}")
        try:
            bridge_mtu_text = (sys_class_net / bridge / "mtu").read_text().splitlines()[0].strip()
        except (OSError, IndexError):
            bridge_mtu_text = ""
        if not bridge_mtu_text:
            raise NetError(f"bridge '{bridge}' does not exist")
        bridge_mtu = int(bridge_mtu_text)
        mtu = int(d.get("mtu") or bridge_mtu)
        if mtu > bridge_mtu:
            raise NetError(f"{key}: MTU size '{mtu}' is bigger than bridge MTU '{bridge_mtu}'")
        lines.append(f"lxc.net.{ind}.mtu = {mtu}")
        # PVE: lxc.net.N.script.up = /usr/share/lxc/lxcnetaddbr, which plugs the host end
        # into the bridge. The stand-in has no PVE perl: LXC's link does the same plug.
        lines.append(f"lxc.net.{ind}.link = {bridge}")
        if d.get("link_down") != "1" and d.get("host-managed") in ("1", "true", "yes", "on"):
            if d.get("ip") and d["ip"] not in ("dhcp", "manual"):
                lines.append(f"lxc.net.{ind}.ipv4.address = {d['ip']}")
            if d.get("gw"):
                lines.append(f"lxc.net.{ind}.ipv4.gateway = {d['gw']}")
            if d.get("ip6"):
                if d["ip6"] == "auto":
                    raise NetError(
                        f"{key}: SLAAC is not supported for host-managed network configuration"
                    )
                if d["ip6"] not in ("dhcp", "manual"):
                    lines.append(f"lxc.net.{ind}.ipv6.address = {d['ip6']}")
            if d.get("gw6"):
                lines.append(f"lxc.net.{ind}.ipv6.gateway = {d['gw6']}")
            lines.append(f"lxc.net.{ind}.flags = up")
    return lines


def _in_cidr(ip: str, cidr: str) -> bool:
    try:
        return ipaddress.ip_address(ip) in ipaddress.ip_interface(cidr).network
    except ValueError:
        return False


def _parse_ipv4_cidr(cidr: str) -> tuple[str, str]:
    """``PVE::LXC::parse_ipv4_cidr``: address and netmask of ``a.b.c.d/N`` (8 <= N <= 32)."""
    m = re.fullmatch(r"(\d{1,3}(?:\.\d{1,3}){3})/(\d+)", cidr)
    if not m or not 7 < int(m[2]) <= 32:
        raise NetError("unable to parse ipv4 address/mask")
    try:
        ipaddress.IPv4Address(m[1])
    except ValueError:
        raise NetError("unable to parse ipv4 address/mask") from None
    return m[1], str(ipaddress.IPv4Network(f"0.0.0.0/{m[2]}").netmask)


def _networks(conf: Mapping[str, str]) -> dict[str, _Net]:  # noqa: PLR0912  (setup_network's loop)
    """``setup_network``'s first loop: one entry per named interface that has a setting."""
    out: dict[str, _Net] = {}
    for key, value in conf.items():
        if not re.fullmatch(r"net\d+", key):
            continue
        d = net_props(key, value)
        name = d.get("name")
        if not name:
            continue
        net = _Net()
        cidr: str | None = None
        ip = d.get("ip")
        if ip is not None:
            if ip in ("dhcp", "manual"):
                net.address = ip
            else:
                net.address, net.netmask = _parse_ipv4_cidr(ip)
                net.cidr = cidr = ip
        if d.get("gw") is not None:
            net.gateway = d["gw"]
            if cidr is not None and not _in_cidr(d["gw"], cidr):
                net.needsroute = True  # gateway not reachable: an extra route
        cidr = None
        ip6 = d.get("ip6")
        if ip6 is not None:
            if ip6 in ("auto", "dhcp", "manual"):
                net.address6 = ip6
            else:
                m = re.fullmatch(r"([0-9A-Fa-f:.]+)/(\d+)", ip6)
                try:
                    ok = m is not None and ipaddress.IPv6Address(m[1]) is not None
                except ValueError:
                    ok = False
                if not ok or m is None:
                    raise NetError("unable to parse ipv6 address/prefix")
                net.address6, net.netmask6, net.cidr6 = m[1], m[2], ip6
                cidr = ip6
        if d.get("gw6") is not None:
            net.gateway6 = d["gw6"]
            if (
                cidr is not None
                and not _in_cidr(d["gw6"], cidr)
                and not _in_cidr(d["gw6"], "fe80::/10")
            ):
                net.needsroute6 = True
        if any(v is not None for v in (net.address, net.gateway, net.address6, net.gateway6)):
            out[name] = net
    return out


def _remove_gateway_scripts(attr: list[str]) -> None:
    """``remove_gateway_scripts``: drop PVE's marked block, or (older setups) its four
    unmarked route lines."""
    found = _BEGIN in attr or _END in attr
    if found:
        keep = True
        kept: list[str] = []
        for line in attr:
            if line == _BEGIN:
                keep = False
            elif line == _END:
                keep = True
            elif keep:
                kept.append(line)
        attr[:] = kept
        return
    i = 0
    while i < len(attr) - 3:
        m0 = _GW_ROUTE.match(attr[i])
        m1 = _GW_DEFAULT.match(attr[i + 1])
        m2 = _GW_DEL_DEFAULT.match(attr[i + 2])
        m3 = _GW_DEL.match(attr[i + 3])
        if m0 and m1 and m2 and m3 and all(m[1] == m0[1] and m[2] == m0[2] for m in (m1, m2, m3)):
            del attr[i : i + 4]
            continue
        i += 1


def _gateway_scripts(ifname: str, gw: str) -> str:
    return (
        f"{_BEGIN}\n\tpost-up ip route add {gw} dev {ifname}\n"
        f"\tpost-up ip route add default via {gw} dev {ifname}\n"
        f"\tpre-down ip route del default via {gw} dev {ifname}\n"
        f"\tpre-down ip route del {gw} dev {ifname}\n{_END}\n"
    )


def render_interfaces(  # noqa: PLR0912, PLR0915  (Debian.pm setup_network, line by line)
    conf: Mapping[str, str], existing: str | None, *, ostype: str, version: int
) -> str | None:
    """The new ``/etc/network/interfaces`` for ``conf`` over ``existing`` (None: no
    file); None when the conf names no interface with a setting (PVE leaves the file)."""
    networks = _networks(conf)
    if not networks:
        return None
    cidr_form = (ostype == "debian" and version >= 10) or (ostype == "alpine" and version >= 3)
    out: list[str] = []
    done_auto: set[str] = set()
    done_v4: set[str] = set()
    done_v6: set[str] = set()
    section: _Section | None = None

    def print_section() -> None:  # noqa: PLR0912, PLR0915  (its $print_section)
        nonlocal section
        if section is None:
            return
        ifname, net = section.ifname, networks[section.ifname]
        if ifname not in done_auto:
            out.append(f"auto {ifname}\n")
            done_auto.add(ifname)
        if section.type == "ipv4":
            done_v4.add(ifname)
            if net.address is None:
                pass  # no address => no iface line
            elif net.address in ("dhcp", "manual"):
                out.append(f"iface {ifname} inet {net.address}\n\n")
            else:
                out.append(f"iface {ifname} inet static\n")
                if cidr_form:
                    if net.cidr is not None:
                        out.append(f"\taddress {net.cidr}\n")
                else:
                    out.append(f"\taddress {net.address}\n")
                    if net.netmask is not None:
                        out.append(f"\tnetmask {net.netmask}\n")
                _remove_gateway_scripts(section.attr)
                if net.gateway is not None:
                    if net.needsroute:
                        out.append(_gateway_scripts(ifname, net.gateway))
                    else:
                        out.append(f"\tgateway {net.gateway}\n")
                out.extend(f"\t{a}\n" for a in section.attr)
                out.append("\n")
        else:
            done_v6.add(ifname)
            if net.address6 is None:
                pass
            elif net.address6 in ("auto", "dhcp", "manual"):
                out.append(f"iface {ifname} inet6 {net.address6}\n\n")
            else:
                out.append(f"iface {ifname} inet6 static\n")
                if cidr_form:
                    if net.cidr6 is not None:
                        out.append(f"\taddress {net.cidr6}\n")
                else:
                    out.append(f"\taddress {net.address6}\n")
                    if net.netmask6 is not None:
                        out.append(f"\tnetmask {net.netmask6}\n")
                _remove_gateway_scripts(section.attr)
                if net.gateway6 is not None:
                    if net.needsroute6:
                        out.append(_gateway_scripts(ifname, net.gateway6))
                    else:
                        out.append(f"\tgateway {net.gateway6}\n")
                out.extend(f"\t{a}\n" for a in section.attr)
                out.append("\n")
        section = None

    for line in (existing or "").splitlines() if existing is not None else []:
        if re.match(r"^# --- (?:BEGIN|END) PVE ---", line):
            if section is not None:
                section.attr.append(line)
            continue
        if line.startswith("#"):
            out.append(f"{line}\n")
            continue
        if not line.strip():
            if section is not None:
                print_section()
            else:
                out.append(f"{line}\n")
            continue
        m = re.match(r"^\s*iface\s+(\S+)\s+inet(6?)\s+(\S+)\s*$", line)
        if m:
            print_section()
            if m[1] not in networks:
                out.append(f"{line}\n")
                continue
            section = _Section("ipv6" if m[2] else "ipv4", m[1])
            continue
        m = re.match(r"^\s*auto\s*(.*)$", line)
        if m:
            done_auto.update(m[1].split())
            print_section()
            out.append(f"{line}\n")
            continue
        if re.match(r"^\s*(?:mapping\s|allow-|source\s|source-directory\s)", line):
            print_section()
            out.append(f"{line}\n")
            continue
        m = re.match(r"^\s*((\S+)\s(.*))$", line)
        if section is not None and m:
            if m[2] not in ("address", "netmask", "gateway", "broadcast"):
                section.attr.append(m[1])
            continue
        out.append(f"{line}\n")
    print_section()

    text = "".join(out)
    need_separator = bool(text) and not text.endswith("\n\n")
    for ifname in sorted(networks):
        net = networks[ifname]
        for kind, done, address in (
            ("ipv4", done_v4, net.address),
            ("ipv6", done_v6, net.address6),
        ):
            if ifname in done or address is None:
                continue
            if need_separator:
                out.append("\n")
                need_separator = False
            section = _Section(kind, ifname)
            print_section()
    text = "".join(out)
    # Older templates (< Debian 8) do not bring loopback up unless told to.
    if "lo" not in done_auto:
        text = "auto lo\niface lo inet loopback\niface lo inet6 loopback\n\n" + text
    return text


def interfaces_path(rootfs: Path) -> Path:
    return rootfs / "etc" / "network" / "interfaces"


def _debian_version(rootfs: Path) -> int | None:
    try:
        first = (rootfs / "etc" / "debian_version").read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return None
    m = re.match(r"^(\d+)", first)
    if m:
        return int(m[1])
    # Testing/unstable name their next release ("trixie/sid"): PVE maps them upward.
    return 99


def setup_network(rootfs: Path, conf: Mapping[str, str]) -> bool:
    """Write the container's ``/etc/network/interfaces`` as PVE's Debian setup does;
    returns whether the file changed. Containers that are not Debian (another ostype,
    no ``etc/debian_version``) are left alone (not emulated)."""
    version = _debian_version(rootfs)
    if version is None or str(conf.get("ostype") or "debian") != "debian":
        return False
    path = interfaces_path(rootfs)
    existing = path.read_text() if path.is_file() else None
    text = render_interfaces(conf, existing, ostype="debian", version=version)
    if text is None or text == existing:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".interfaces.pve-tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return True
