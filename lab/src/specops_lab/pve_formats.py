"""Named formats of the Proxmox VE API schema, each following its upstream validator.

PVE registers formats with ``PVE::JSONSchema::register_format``: a code validator (a
function that ``die``s) or a hash (the sub-keys of a property string). This module holds
the ones a call of this project can reach, each naming the upstream file and function it
was read from (commits in :data:`specops_lab.pve_schema.UPSTREAM`), plus the Perl helpers they
need (``split_list``, ``parse_boolean``, the IP/e-mail regexes of ``PVE::ParseUtils``) and
the translation of schema ``pattern``s from Perl to Python. Validation itself
(``check_prop`` and friends) is in :mod:`specops_lab.pve_jsonschema`.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "CODE_FORMATS",
    "HASH_FORMATS",
    "IPV4RE",
    "IPV6RE",
    "FormatError",
    "SchemaUnsupported",
    "is_integer",
    "is_number",
    "parse_boolean",
    "perl_pattern",
    "perl_str",
    "split_list",
]


class SchemaUnsupported(Exception):
    """The schema uses something this module does not implement (a named format, a
    keyword, a Perl regex feature): a clear error naming it, never a silent pass."""


class FormatError(ValueError):
    """What a PVE format validator ``die``s with (the message, newline added on output)."""


# --------------------------------------------------------------------------- Perl regexes

_PERL_FLAGS = "imsx"


@functools.lru_cache(maxsize=512)
def perl_pattern(pattern: str) -> re.Pattern[str]:
    """A schema ``pattern`` (Perl syntax) compiled the way PVE applies it: ``m/^$pattern$/``
    (interpolated as is, so a top-level ``|`` binds as it does in Perl).

    Translated: ``(?^flags:...)`` (Perl's "reset to defaults" group, as ``qr//`` prints
    itself) becomes ``(?flags-others:...)``; ``\\z`` becomes ``\\Z``; ``\\h`` becomes
    ``[ \\t]``; ``(?<name>`` becomes ``(?P<name>``. Perl ``$`` and Python ``$`` both match
    before a final newline. Anything else that does not compile raises
    :class:`SchemaUnsupported` naming the pattern.
    """
    if "(?{" in pattern or "(??{" in pattern:
        raise SchemaUnsupported(f"pattern {pattern!r}: Perl code blocks cannot be translated")

    def flags(m: re.Match[str]) -> str:
        on = m.group(1)
        off = "".join(f for f in _PERL_FLAGS if f not in on)
        return f"(?{on}-{off}:" if off else f"(?{on}:"

    py = re.sub(r"\(\?\^([a-z]*):", flags, pattern)
    py = py.replace(r"\z", r"\Z").replace(r"\h", r"[ \t]")
    py = re.sub(r"\(\?<([A-Za-z_]\w*)>", r"(?P<\1>", py)
    try:
        return re.compile(f"^{py}$")
    except re.error as exc:
        raise SchemaUnsupported(
            f"pattern {pattern!r} (as Python: {py!r}) does not compile: {exc}"
        ) from None


# --------------------------------------------------------------------------- Perl helpers


def perl_str(value: Any) -> str:
    """A scalar as Perl stringifies it (``1.0`` is ``1``)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse_boolean(value: str) -> int | None:
    """pve-common JSONSchema.pm ``parse_boolean``."""
    if re.match(r"^(1|on|yes|true)$", value, re.IGNORECASE):
        return 1
    if re.match(r"^(0|off|no|false)$", value, re.IGNORECASE):
        return 0
    return None


def split_list(text: str | None) -> list[str]:
    """pve-common ParseUtils.pm ``split_list``: ``\\0``-separated, else on ``,;`` and
    whitespace (Perl's ``split`` drops a leading empty field only after the trim)."""
    text = text or ""
    if "\0" in text:
        parts = text.split("\0")
        while parts and parts[-1] == "":
            parts.pop()
        return parts
    text = re.sub(r"[,;]", " ", text).lstrip()
    return [p for p in re.split(r"\s+", text) if p] if text else []


def is_number(value: str) -> bool:
    return bool(re.match(r"^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$", value))


def is_integer(value: str) -> bool:
    return bool(re.match(r"^[+-]?\d+$", value))


# --------------------------------------------------------------------------- formats
# Each validator raises FormatError with the upstream ``die`` text (no trailing newline).

_IPV4OCTET = r"(?:25[0-5]|(?:2[0-4]|1[0-9]|[1-9])?[0-9])"
IPV4RE = rf"(?:(?:{_IPV4OCTET}\.){{3}}{_IPV4OCTET})"
_H16 = r"(?:[0-9a-fA-F]{1,4})"
_LS32 = rf"(?:(?:{IPV4RE}|{_H16}:{_H16}))"
IPV6RE = (
    "(?:"
    rf"(?:(?:(?:{_H16}:){{6}}){_LS32})|"
    rf"(?:(?:::(?:{_H16}:){{5}}){_LS32})|"
    rf"(?:(?:(?:{_H16})?::(?:{_H16}:){{4}}){_LS32})|"
    rf"(?:(?:(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}){_LS32})|"
    rf"(?:(?:(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}){_LS32})|"
    rf"(?:(?:(?:(?:{_H16}:){{0,3}}{_H16})?::(?:{_H16}:){{1}}){_LS32})|"
    rf"(?:(?:(?:(?:{_H16}:){{0,4}}{_H16})?::){_LS32})|"
    rf"(?:(?:(?:(?:{_H16}:){{0,5}}{_H16})?::){_H16})|"
    rf"(?:(?:(?:(?:{_H16}:){{0,6}}{_H16})?::))"
    ")"
)
_EMAIL_USER_RE = r"[\w\+\-\~]+(\.[\w\+\-\~]+)*"
_EMAIL_RE = rf"{_EMAIL_USER_RE}@[a-zA-Z0-9\-]+(\.[a-zA-Z0-9\-]+)*"
_CONFIGID_RE = r"[a-z][a-z0-9_-]+"
_PVE_TAG_RE = r"[a-z0-9_][a-z0-9_\-\+\.]*"
_IPV4_MASKS = {str(ipaddress.IPv4Network(f"0.0.0.0/{n}").netmask) for n in range(33)}
# pve-storage DirPlugin.pm plugindata content (valid_content_types('dir')).
_DIR_CONTENT = {"images", "rootdir", "vztmpl", "iso", "backup", "snippets", "none", "import"}


def _m(pattern: str, value: str, flags: int = 0) -> bool:
    return re.match(pattern, value, flags) is not None


def _check(predicate: Callable[[str], bool], message: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if not predicate(value):
            raise FormatError(message.format(value=value))

    return check


def _rx(pattern: str, message: str, flags: int = 0) -> Callable[[str], None]:
    def check(value: str) -> None:
        if not _m(pattern, value, flags):
            raise FormatError(message.format(value=value))

    return check


def _parse_id(kind: str) -> Callable[[str], None]:
    """pve-common JSONSchema.pm ``parse_id``."""

    def check(value: str) -> None:
        if len(value) < 2:
            raise FormatError(f"{kind} ID '{value}' cannot be shorter than 2 characters")
        if not _m(r"^[a-z][a-z0-9\-\_\.]*[a-z0-9]$", value, re.IGNORECASE):
            raise FormatError(f"{kind} ID '{value}' contains illegal characters")

    return check


def _verify_ip(value: str) -> None:
    if not _m(rf"^(?:(?:{IPV4RE})|(?:{IPV6RE}))$", value):
        raise FormatError("value does not look like a valid IP address")


def _cidr(regex: str, low: int, high: int, value: str) -> bool:
    m = re.match(rf"^(?:{regex})(?:/(\d+))$", value)
    return m is not None and low < int(m.group(1)) <= high


def _verify_cidr(value: str) -> None:
    if not (_cidr(IPV4RE, 7, 32, value) or _cidr(IPV6RE, 7, 128, value)):
        raise FormatError("value does not look like a valid CIDR network")


def _verify_dns_name(value: str) -> None:
    name = r"([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)"
    if not _m(rf"^({name}\.)*{name}$", value):
        raise FormatError("value does not look like a valid DNS name")


def _verify_timezone(value: str) -> None:
    """pve-common ``pve_verify_timezone``: UTC or a zone of zone.tab."""
    if value == "UTC":
        return
    tab = Path("/usr/share/zoneinfo/zone.tab")
    if not tab.is_file():
        raise SchemaUnsupported(f"timezone format: {tab} is missing on this machine")
    for line in tab.read_text().splitlines():
        if re.match(r"^\s*#", line):
            continue
        fields = line.split("\t")
        if len(fields) > 2 and fields[2] == value:
            return
    raise FormatError(f"invalid time zone '{value}'")


def _verify_iface(value: str) -> None:
    if not _m(r"^[a-z][a-z0-9_]{1,20}([:\.]\d+)?$", value, re.IGNORECASE):
        raise FormatError(f"invalid network interface name '{value}'")


def _verify_vlan(value: str) -> None:
    m = re.match(r"^(\d+)(?:-(\d+))?$", value)
    if not m:
        raise FormatError(f"invalid VLAN configuration '{value}'")
    for tag in (m.group(1), m.group(2)):
        if tag and not 2 <= int(tag) <= 4094:
            raise FormatError(f"invalid VLAN tag '{tag}'")
    if m.group(2) and int(m.group(1)) >= int(m.group(2)):
        raise FormatError(f"VLAN range must go from lower to higher tag '{value}'")


def _verify_address(value: str) -> None:
    try:
        _verify_ip(value)
        return
    except FormatError:
        pass
    try:
        _verify_dns_name(value)
    except FormatError:
        raise FormatError(f"value does not look like a valid address: {value}") from None


def _verify_disk_size(value: str) -> None:
    if not _m(r"^(\d+(\.\d+)?)([KMGT](?:iB)?)?$", value):
        raise FormatError(f"value does not look like a valid disk size: {value}")


def _verify_startup_order(value: str) -> None:
    """pve-common ``pve_verify_startup_order`` / ``pve_parse_startup_order``."""
    ok = bool(value) and value != "0"
    for part in value.split(","):
        if not ok or _m(r"^\s*$", part):
            continue
        if not (
            _m(r"^(order=)?(\d+)$", part) or _m(r"^up=(\d+)$", part) or _m(r"^down=(\d+)$", part)
        ):
            ok = False
    if not ok:
        raise FormatError("unable to parse startup options")


def _verify_idmap_entry(idformat: str) -> Callable[[str], None]:
    """pve-common ``$verify_idpair`` -> ``parse_idmap`` for one list entry."""

    def check(value: str) -> None:
        entries: dict[str, str] = {}
        default = identity = False
        for entry in split_list(value):
            if entry == "1":
                identity = True
                continue
            m = re.match(r"^([^:]+):([^:]+)$", entry)
            ids = [m.group(1), m.group(2)] if m else [entry]
            for ident in ids:
                try:
                    CODE_FORMATS[idformat][0](ident)
                except FormatError as exc:
                    raise FormatError(f"entry '{entry}' contains invalid ID - {exc}") from None
            if m:
                if m.group(1) in entries:
                    raise FormatError(f"duplicate mapping for source '{m.group(1)}'")
                entries[m.group(1)] = m.group(2)
            else:
                if default:
                    raise FormatError("default target ID can only be provided once")
                default = True
        if identity and (default or entries):
            raise FormatError("identity mapping cannot be combined with other mappings")

    return check


def _verify_ip_with_ll_iface(value: str) -> None:
    """pve-container Config.pm ``verify_ip_with_ll_iface``."""
    m = re.match(r"^(fe80:[^%]+)%(.*)$", value)
    if m:
        try:
            _verify_ip(m.group(1))
            _verify_iface(m.group(2))
            return
        except FormatError:
            pass
    _verify_ip(value)


def _verify_lxc_mp_string(value: str) -> None:
    """pve-container Config.pm ``verify_lxc_mp_string``."""
    if re.search(r"/\.\.?/", value) or re.search(r"/\.\.?$", value) or value.startswith("../"):
        raise FormatError(f"{value} contains illegal character sequences")


def _verify_lxc_dev_string(value: str) -> None:
    """pve-container Config.pm ``verify_lxc_dev_string``."""
    if re.search(r"/\.\.?(?:/|$)", value) or not value.startswith("/dev/"):
        raise FormatError(f"{value} is not a valid device path")


def _verify_ct_timezone(value: str) -> None:
    """pve-container Config.pm ``verify_ct_timezone``."""
    if value != "host":
        _verify_timezone(value)


def _verify_content(value: str) -> None:
    """pve-storage Plugin.pm ``verify_content``."""
    if value != "import" and value not in _DIR_CONTENT:
        raise FormatError(f"invalid content type '{value}'")


def _verify_poolname(value: str) -> None:
    """pve-access-control AccessControl.pm ``verify_poolname``."""
    parts = value.split("/")
    while parts and parts[-1] == "":
        parts.pop()
    if len(parts) > 3:
        raise FormatError(f"pool name '{value}' nested too deeply (max levels = 3)")
    if not _m(r"^[A-Za-z0-9\.\-_]+(?:/[A-Za-z0-9\.\-_]+){0,2}$", value):
        raise FormatError(f"pool name '{value}' contains invalid characters")


def _no_check(_value: str) -> None:
    return None


def _tfa_secret(value: str) -> None:
    if not (
        _m(r"^v2-0x[0-9a-fA-F]{16,128}$", value)
        or _m(r"^v2-[A-Z2-7=]{16,128}$", value)
        or _m(r"^(?:[A-Z2-7=]{16}|[A-Fa-f0-9]{40})$", value)
    ):
        raise FormatError("unable to decode TFA secret")


def _email_or_username(value: str) -> None:
    if not (_m(rf"^{_EMAIL_RE}$", value) or _m(rf"^{_EMAIL_USER_RE}$", value)):
        raise FormatError("value does not look like a valid email address or user name")


# name -> (validator, "upstream file: function"). Only formats a call of this project can
# reach need to be here (tests/unit/test_pve_schema.py proves each reachable one is);
# any other format raises SchemaUnsupported when a value reaches it.
_PC = "pve-common src/PVE/JSONSchema.pm"
CODE_FORMATS: dict[str, tuple[Callable[[str], None], str]] = {
    "string": (_no_check, f"{_PC}: register_format('string')"),
    "urlencoded": (
        _rx(r"^[-%a-zA-Z0-9_.!~*'()]*$", "invalid urlencoded string: {value}"),
        f"{_PC}: pve_verify_urlencoded",
    ),
    "pve-configid": (
        _rx(rf"^{_CONFIGID_RE}$", "invalid configuration ID '{value}'", re.IGNORECASE),
        f"{_PC}: pve_verify_configid",
    ),
    "pve-storage-id": (_parse_id("storage"), f"{_PC}: parse_storage_id"),
    "pve-bridge-id": (
        _rx(r"^[-_.\w\d]+$", "invalid bridge ID '{value}'"),
        f"{_PC}: parse_bridge_id",
    ),
    "pve-vmid": (
        _rx(r"^[1-9][0-9]{2,8}$", "value does not look like a valid VM ID"),
        f"{_PC}: pve_verify_vmid",
    ),
    "pve-node": (
        _rx(
            r"^([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$",
            "value does not look like a valid node name",
        ),
        f"{_PC}: pve_verify_node_name",
    ),
    "storage-pair": (_verify_idmap_entry("pve-storage-id"), f"{_PC}: verify_storagepair"),
    "bridge-pair": (_verify_idmap_entry("pve-bridge-id"), f"{_PC}: verify_bridgepair"),
    "mac-addr": (
        _rx(
            r"^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$",
            "value does not look like a valid unicast MAC address",
            re.IGNORECASE,
        ),
        f"{_PC}: pve_verify_mac_addr",
    ),
    "ipv4": (
        _rx(rf"^(?:{IPV4RE})$", "value does not look like a valid IPv4 address"),
        f"{_PC}: pve_verify_ipv4",
    ),
    "ipv6": (
        _rx(rf"^(?:{IPV6RE})$", "value does not look like a valid IPv6 address"),
        f"{_PC}: pve_verify_ipv6",
    ),
    "ip": (_verify_ip, f"{_PC}: pve_verify_ip"),
    "ldap-simple-attr": (
        _rx(r"^[a-zA-Z0-9]+$", "value '{value}' does not look like a simple ldap attribute name"),
        f"{_PC}: verify_ldap_simple_attr",
    ),
    "ipv4mask": (
        _check(lambda v: v in _IPV4_MASKS, "value does not look like a valid IP netmask"),
        f"{_PC}: pve_verify_ipv4mask",
    ),
    "CIDRv6": (
        _check(
            lambda v: _cidr(IPV6RE, 7, 128, v), "value does not look like a valid IPv6 CIDR network"
        ),
        f"{_PC}: pve_verify_cidrv6",
    ),
    "CIDRv4": (
        _check(
            lambda v: _cidr(IPV4RE, 7, 32, v), "value does not look like a valid IPv4 CIDR network"
        ),
        f"{_PC}: pve_verify_cidrv4",
    ),
    "CIDR": (_verify_cidr, f"{_PC}: pve_verify_cidr"),
    "pve-ipv4-config": (
        _check(
            lambda v: _m(r"^(?:dhcp|manual)$", v) or _cidr(IPV4RE, 7, 32, v),
            "value does not look like a valid ipv4 network configuration",
        ),
        f"{_PC}: pve_verify_ipv4_config",
    ),
    "pve-ipv6-config": (
        _check(
            lambda v: _m(r"^(?:auto|dhcp|manual)$", v) or _cidr(IPV6RE, 7, 128, v),
            "value does not look like a valid ipv6 network configuration",
        ),
        f"{_PC}: pve_verify_ipv6_config",
    ),
    "email": (
        _rx(rf"^{_EMAIL_RE}$", "value does not look like a valid email address"),
        f"{_PC}: pve_verify_email",
    ),
    "email-or-username": (_email_or_username, f"{_PC}: pve_verify_email_or_username"),
    "dns-name": (_verify_dns_name, f"{_PC}: pve_verify_dns_name"),
    "timezone": (_verify_timezone, f"{_PC}: pve_verify_timezone"),
    "pve-iface": (_verify_iface, f"{_PC}: pve_verify_iface"),
    "pve-vlan-id-or-range": (_verify_vlan, f"{_PC}: pve_verify_vlan_id_or_range"),
    "address": (_verify_address, f"{_PC}: pve_verify_address"),
    "disk-size": (_verify_disk_size, f"{_PC}: pve_verify_disk_size"),
    "pve-startup-order": (_verify_startup_order, f"{_PC}: pve_verify_startup_order"),
    "pve-tag": (
        _rx(rf"^{_PVE_TAG_RE}$", "invalid characters in tag", re.IGNORECASE),
        f"{_PC}: pve_verify_tag",
    ),
    "pve-tfa-secret": (_tfa_secret, f"{_PC}: pve_verify_tfa_secret"),
    "pve-task-status-type": (
        _rx(r"^(ok|error|warning|unknown)$", "invalid status '{value}'", re.IGNORECASE),
        f"{_PC}: verify_task_status_type",
    ),
    "lxc-ip-with-ll-iface": (
        _verify_ip_with_ll_iface,
        "pve-container src/PVE/LXC/Config.pm: verify_ip_with_ll_iface",
    ),
    "pve-ct-timezone": (
        _verify_ct_timezone,
        "pve-container src/PVE/LXC/Config.pm: verify_ct_timezone",
    ),
    "pve-lxc-mp-string": (
        _verify_lxc_mp_string,
        "pve-container src/PVE/LXC/Config.pm: verify_lxc_mp_string",
    ),
    "pve-lxc-dev-string": (
        _verify_lxc_dev_string,
        "pve-container src/PVE/LXC/Config.pm: verify_lxc_dev_string",
    ),
    "pve-volume-id": (
        _rx(
            r"^([a-z][a-z0-9\-\_\.]*[a-z0-9]):(.+)$",
            "unable to parse volume ID '{value}'",
            re.IGNORECASE,
        ),
        "pve-storage src/PVE/Storage/Plugin.pm: parse_volume_id",
    ),
    "pve-storage-content": (
        _verify_content,
        "pve-storage src/PVE/Storage/Plugin.pm: verify_content",
    ),
    "pve-poolid": (
        _verify_poolname,
        "pve-access-control src/PVE/AccessControl.pm: verify_poolname",
    ),
}


def _validate_prune_backups(res: dict[str, Any]) -> dict[str, Any]:
    """pve-storage Plugin.pm ``validate_prune_backups``."""
    out = dict(res)
    keep_all = out.pop("keep-all", None)
    if not any(is_number(perl_str(v)) and float(v) > 0 for v in out.values()):
        return {"keep-all": 1}
    if keep_all and str(keep_all) not in ("", "0"):
        raise FormatError("keep-all cannot be set together with other options.")
    return out


def _verify_backup_fleecing(res: dict[str, Any]) -> dict[str, Any]:
    """pve-guest-common VZDump/Common.pm ``verify_backup_fleecing``."""
    if not res.get("storage") and res.get("enabled"):
        raise FormatError("'storage' parameter is required when 'enabled' is set")
    return res


_PRUNE_OPTION = {"optional": 1, "type": "integer", "minimum": 0, "format_description": "N"}
# Hash-based named formats: name -> (sub-key schema, validator or None, upstream).
# The schema's ``typetext`` of each parameter using one is generate_typetext() of the
# hash PVE registered; tests compare it with generate_typetext() of these copies.
HASH_FORMATS: dict[
    str,
    tuple[dict[str, dict[str, Any]], Callable[[dict[str, Any]], dict[str, Any]] | None, str],
] = {
    "prune-backups": (
        {
            "keep-all": {"type": "boolean", "optional": 1},
            "keep-last": _PRUNE_OPTION,
            "keep-hourly": _PRUNE_OPTION,
            "keep-daily": _PRUNE_OPTION,
            "keep-weekly": _PRUNE_OPTION,
            "keep-monthly": _PRUNE_OPTION,
            "keep-yearly": _PRUNE_OPTION,
        },
        _validate_prune_backups,
        "pve-storage src/PVE/Storage/Plugin.pm: $prune_backups_format",
    ),
    "backup-fleecing": (
        {
            "enabled": {"type": "boolean", "default": 0, "optional": 1, "default_key": 1},
            "storage": {
                "type": "string",
                "format": "pve-storage-id",
                "typetext": "<storage ID>",
                "optional": 1,
            },
        },
        _verify_backup_fleecing,
        "pve-guest-common src/PVE/VZDump/Common.pm: register_format('backup-fleecing')",
    ),
    "backup-performance": (
        {
            "max-workers": {"type": "integer", "minimum": 1, "maximum": 256, "optional": 1},
            "pbs-entries-max": {"type": "integer", "minimum": 1, "optional": 1},
        },
        None,
        "pve-guest-common src/PVE/VZDump/Common.pm: register_format('backup-performance')",
    ),
}
