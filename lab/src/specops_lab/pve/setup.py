"""What PVE writes into a container's files before each start (its "setup" step).

pve-container ``src/PVE/LXC/Setup/Base.pm`` (commit in
:data:`specops_lab.pve_schema.UPSTREAM`), called from the prestart hook's ``pre_start_hook``:
``setup_network`` (Debian.pm's: ``/etc/network/interfaces`` from the ``netN`` entries,
``specops_lab.pve.lxcnet``), ``set_hostname`` (``/etc/hostname`` gets the name up to
the first dot, ``/etc/hosts`` a ``# --- BEGIN PVE ---`` section by
``update_etc_hosts``) and ``set_dns`` (``/etc/resolv.conf`` replaced by a PVE section:
the conf's ``searchdomain``/``nameserver``, else the host's own, as ``lookup_dns_conf``
with pve-common INotify.pm ``read_etc_resolv_conf`` reads them). ``ct_modify_file`` and
``remove_pve_sections`` follow the functions of the same name; a file with a
``.pve-ignore.<name>`` beside it is left alone (``ct_is_file_ignored``).

Deliberate difference: a symlinked ``/etc/resolv.conf`` (systemd-resolved) is left alone;
PVE writes through it inside the container's mount namespace.
"""

from __future__ import annotations

import re
from pathlib import Path

from specops_lab.pve.conf import GuestConf, parse_lxc_network
from specops_lab.pve.lxcnet import setup_network
from specops_lab.pve_formats import IPV4RE, IPV6RE, split_list

__all__ = ["ct_modify_file", "remove_pve_sections", "setup_guest"]

_HEAD = "# --- BEGIN PVE ---\n"
_TAIL = "# --- END PVE ---\n"


def _ignored(root: Path, file: str) -> bool:
    """Base.pm ``ct_is_file_ignored``: ``/etc/.pve-ignore.hosts`` and the like."""
    path = root / file.lstrip("/")
    return (path.parent / f".pve-ignore.{path.name}").exists()


def remove_pve_sections(data: str) -> str:
    """Base.pm ``remove_pve_sections``."""
    return re.sub(
        r"^[ \t]*# --- BEGIN PVE ---.*?^[ \t]*# --- END PVE ---.*?$", "", data, flags=re.M | re.S
    )


def ct_modify_file(root: Path, file: str, data: str, *, replace: bool = False) -> None:
    """Base.pm ``ct_modify_file``: replace the PVE section of ``file``, or add one (at the
    end, or as the whole file with ``replace``)."""
    if _ignored(root, file):
        return
    path = root / file.lstrip("/")
    if data and not data.endswith("\n"):
        data += "\n"
    if not path.exists():
        if data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_HEAD + data + _TAIL)
        return
    lines = path.read_text().split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    beg = end = None
    for i, line in enumerate(lines):
        if beg is None and re.match(r"^#\s*---\s*BEGIN\s*PVE\s*", line):
            beg = i
        elif beg is not None and end is None and re.match(r"^#\s*---\s*END\s*PVE\s*", line, re.I):
            end = i
            break
    if beg is not None and end is not None:
        lines[beg : end + 1] = [_HEAD + data + _TAIL.rstrip("\n")]
        path.write_text("\n".join(lines) + "\n")
    elif data:
        content = "\n".join(lines).removesuffix("\n") + "\n"
        path.write_text(_HEAD + data + _TAIL if replace else content + _HEAD + data + _TAIL)


def _primary_ip(conf: GuestConf) -> str | None:
    """LXC.pm ``get_primary_ips`` (from ``net0``), IPv4 before IPv6."""
    net0 = conf.get("net0")
    if not net0:
        return None
    net = parse_lxc_network(net0)
    for key, dynamic in (("ip", ("dhcp", "manual")), ("ip6", ("auto", "dhcp", "manual"))):
        value = str(net.get(key) or "")
        if value and value not in dynamic:
            return re.sub(r"/\d+$", "", value)
    return None


def _host_resolv_conf() -> dict[str, str]:
    """pve-common INotify.pm ``read_etc_resolv_conf`` of the host's /etc/resolv.conf."""
    out: dict[str, str] = {}
    path = Path("/etc/resolv.conf")
    count = 0
    for line in path.read_text().splitlines() if path.is_file() else []:
        m = re.match(r"^(search|domain)\s+(\S+)\s*", line)
        if m:
            out["search"] = m.group(2)
            continue
        m = re.match(rf"^\s*nameserver\s+((?:{IPV4RE})|(?:{IPV6RE}))\s*", line)
        if m:
            count += 1
            if count <= 3:
                out[f"dns{count}"] = m.group(1)
    return out


def _lookup_dns_conf(conf: GuestConf) -> tuple[str | None, str]:
    """Base.pm ``lookup_dns_conf``: (search domains, name servers)."""
    host = _host_resolv_conf()
    nameserver = conf.get("nameserver")
    if nameserver is None:
        nameserver = " ".join(host[k] for k in ("dns1", "dns2", "dns3") if host.get(k))
    search = conf.get("searchdomain")
    if search is None:
        search = host.get("search")
    return search, nameserver


def _update_etc_hosts(root: Path, hostip: str | None, newname: str, search: str | None) -> None:
    """Base.pm ``update_etc_hosts``."""
    file = "/etc/hosts"
    if _ignored(root, file):
        return
    namepart = newname.split(".", 1)[0]
    if "." in newname:
        all_names = f"{newname} {namepart}"
    else:
        all_names = " ".join([*(f"{newname}.{d}" for d in split_list(search)), newname])
    section = ""
    lo4 = "127.0.0.1 localhost.localnet localhost\n"
    lo6 = "::1 localhost.localnet localhost\n"
    path = root / "etc" / "hosts"
    if path.exists():
        data = remove_pve_sections(path.read_text())
        if not re.search(r"^[ \t]*127\.0\.0\.1[ \t]+", data, re.M):
            section += lo4
        if not re.search(r"^[ \t]*::1[ \t]+", data, re.M):
            section += lo6
    else:
        section += lo4 + lo6
    if hostip is not None:
        section += f"{hostip} {all_names}\n"
    elif namepart != "localhost":
        section += f"127.0.1.1 {all_names}\n"
    else:
        section += f"127.0.1.1 {namepart}\n"
    ct_modify_file(root, file, section)


def setup_guest(root: Path, conf: GuestConf) -> None:
    """Base.pm ``pre_start_hook``'s ``setup_network`` (Debian.pm's, ``lxcnet.py``), then
    ``set_hostname`` and ``set_dns`` on the container's root directory."""
    setup_network(root, dict(conf.main.options))
    hostname = conf.get("hostname") or "localhost"
    namepart = hostname.split(".", 1)[0]
    search, nameserver = _lookup_dns_conf(conf)
    (root / "etc").mkdir(parents=True, exist_ok=True)
    _update_etc_hosts(root, _primary_ip(conf), hostname, search)
    (root / "etc" / "hostname").write_text(f"{namepart}\n")
    resolv = root / "etc" / "resolv.conf"
    if resolv.is_symlink():  # see the module docstring
        return
    data = f"search {' '.join(split_list(search))}\n" if search else ""
    data += "".join(f"nameserver {ns}\n" for ns in split_list(nameserver))
    ct_modify_file(root, "/etc/resolv.conf", data, replace=True)
