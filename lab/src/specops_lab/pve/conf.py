"""The stand-in's own reader and writer of PVE guest configs, derived from PVE's grammar.

Deliberately NOT the production parser (``module_utils/pve/conf.py``): the stand-in
reads what the project's modules write with code of its own, taken from PVE's source, so
a writer bug in production cannot hide behind a shared reader
(``tests/lab/test_pve_conf_grammar.py`` runs both over the same confs). Upstream
commits: :data:`specops_lab.pve_schema.UPSTREAM`.

- :func:`parse_pct_config` / :func:`write_pct_config`: pve-container
  ``src/PVE/LXC/Config.pm`` functions of the same name (the main section, ``[pve:pending]``,
  ``[snapshot]`` sections; ``#`` lines and ``description:`` are the description;
  ``lxc.*`` keys checked by ``is_valid_lxc_conf_key``, ``lxc.environment.runtime``
  collected into ``env``; values through ``check_type``; ``delete:`` only in pending;
  lines PVE cannot parse are warnings, or errors with ``strict``).
- :func:`parse_vm_config`: qemu-server ``src/PVE/QemuServer.pm`` ``parse_vm_config``
  (``[PENDING]``, ``[special:...]`` sections skipped, keys may hold ``-``, a value that
  fails ``check_type`` is dropped, the description's trailing blanks trimmed). Only types
  are checked for VM confs (the lab's VMs are a conf plus a running flag).
- :func:`parse_volume`, :func:`parse_device`, :func:`parse_lxc_network`,
  :func:`classify_mountpoint`: Config.pm functions of the same names.
- pending-change helpers: pve-guest-common ``src/PVE/AbstractConfig.pm``
  (``parse_pending_delete``, ``print_pending_delete``, ``add_to_pending_delete``,
  ``remove_from_pending_delete``, ``cleanup_pending``, ``load_current_config``).
- :func:`lock_config`: ``PVE::AbstractConfig::lock_config`` ->
  ``PVE::Tools::lock_file_full`` (flock on ``/run/lock/lxc/pve-config-<vmid>.lock``, 10 s,
  "can't lock file '<path>' - got timeout").
- :func:`encode_text` / :func:`decode_text`: pve-common ``src/PVE/ParseUtils.pm``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.file_lock import flock_within

from specops.errors import SpecopsError
from specops_lab.pve_formats import FormatError, SchemaUnsupported, split_list
from specops_lab.pve_jsonschema import (
    PropertyStringError,
    check_format,
    parse_property_string,
    print_property_string,
)
from specops_lab.pve_schema import find_endpoint

__all__ = [
    "LXC_FASTPLUG_OPTIONS",
    "ConfError",
    "GuestConf",
    "Section",
    "add_to_pending_delete",
    "check_type",
    "classify_mountpoint",
    "cleanup_pending",
    "conf_bytes",
    "config_lock_path",
    "current_config",
    "decode_text",
    "encode_text",
    "is_valid_lxc_conf_key",
    "lock_config",
    "lxc_confdesc",
    "option_exists",
    "parse_device",
    "parse_lxc_network",
    "parse_pct_config",
    "parse_pending_delete",
    "parse_vm_config",
    "parse_volume",
    "print_pending_delete",
    "print_volume",
    "read_conf",
    "remove_from_pending_delete",
    "split_nameservers",
    "write_pct_config",
]


class ConfError(SpecopsError):
    """What PVE ``die``s with while reading or writing a config (its wording)."""


@dataclass
class Section:
    """One section of the parsed config hash: options (``description`` and ``env``
    included, as PVE keeps them) and the raw ``lxc`` pairs in file order."""

    options: dict[str, str] = field(default_factory=dict)
    lxc: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:  # PVE: scalar(keys %{$conf->{pending}})
        return bool(self.options or self.lxc)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key, default)


@dataclass
class GuestConf:
    """PVE's parsed config: the main section, ``pending``, ``snapshots``, ``digest``."""

    main: Section
    pending: Section
    snapshots: dict[str, Section]
    digest: str
    warnings: list[str] = field(default_factory=list)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.main.options.get(key, default)

    def indexed(self, prefix: str) -> dict[int, str]:
        """``devN``/``mpN``/``netN`` of the main section by N, in N order."""
        pattern = re.compile(rf"^{re.escape(prefix)}(\d+)$")
        found = {
            int(m.group(1)): v for k, v in self.main.options.items() if (m := pattern.match(k))
        }
        return dict(sorted(found.items()))


# --------------------------------------------------------------------------- text codec


def encode_text(text: str) -> str:
    """``PVE::ParseUtils::encode_text``: every byte outside 0x20-0x7e, and ``%`` ``:``,
    as ``%XX`` of its UTF-8 encoding."""
    return "".join(
        chr(b) if 0x20 <= b <= 0x7E and b not in (0x25, 0x3A) else f"%{b:02X}"
        for b in text.encode("utf-8")
    )


def decode_text(text: str) -> str:
    """``PVE::ParseUtils::decode_text``: ``uri_unescape`` then UTF-8 decode."""
    return urllib.parse.unquote_to_bytes(text).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- confdesc


@functools.lru_cache(maxsize=2)
def _confdesc(kind: str) -> dict[str, Mapping[str, Any]]:
    """The guest options PVE knows (``$confdesc``), from the API schema: what ``GET
    .../config`` documents (``json_config_properties``) plus ``parent`` and ``snaptime``,
    which that function leaves out."""
    template = (
        "/nodes/{node}/lxc/{vmid}/config" if kind == "lxc" else "/nodes/{node}/qemu/{vmid}/config"
    )
    props = find_endpoint("GET", template).info.get("returns", {}).get("properties", {})
    desc: dict[str, Mapping[str, Any]] = {
        k: v for k, v in props.items() if k not in ("lxc", "digest")
    }
    desc.setdefault("parent", {"type": "string", "format": "pve-configid"})
    desc.setdefault("snaptime", {"type": "integer"})
    return desc


def lxc_confdesc() -> dict[str, Mapping[str, Any]]:
    return _confdesc("lxc")


def _option_schema(kind: str, key: str) -> Mapping[str, Any] | None:
    desc = _confdesc(kind)
    if key in desc:
        return desc[key]
    m = re.fullmatch(r"([a-z][a-z_\-]*?)(\d+)", key)
    limits = {"dev": 256, "mp": 256, "unused": 256, "net": 32}
    if m and f"{m.group(1)}[n]" in desc and int(m.group(2)) < limits.get(m.group(1), 256):
        return desc[f"{m.group(1)}[n]"]
    return None


def option_exists(kind: str, key: str) -> bool:
    """Config.pm ``option_exists``: ``$confdesc`` has the key (``devN`` etc. included)."""
    return _option_schema(kind, key) is not None


def check_type(  # noqa: PLR0912  (Config.pm check_type's branches)
    kind: str, key: str, value: str, *, formats: bool = True
) -> str:
    """pve-container Config.pm ``check_type`` (qemu-server's is the same for types):
    booleans to 1/0, integers to their value, formats checked. Raises ConfError."""
    schema = _option_schema(kind, key)
    if schema is None:
        raise ConfError(f"unknown setting '{key}'\n")
    if re.search(r"[\n\r]", value):
        raise ConfError("property contains a line feed\n")
    typ = schema.get("type")
    if typ == "boolean":
        if value == "1" or re.match(r"^(on|yes|true)$", value, re.IGNORECASE):
            return "1"
        if value == "0" or re.match(r"^(off|no|false)$", value, re.IGNORECASE):
            return "0"
        raise ConfError(f"type check ('boolean') failed - got '{value}'\n")
    if typ == "integer":
        m = re.match(r"^(\d+)$", value)
        if not m:
            raise ConfError(f"type check ('integer') failed - got '{value}'\n")
        return str(int(m.group(1)))
    if typ == "number":
        if not re.match(r"^(\d+)(\.\d+)?$", value):
            raise ConfError(f"type check ('number') failed - got '{value}'\n")
        return value
    if typ == "string":
        fmt = schema.get("format")
        if fmt and formats:
            try:
                check_format(fmt, value)
            except PropertyStringError as exc:
                raise ConfError(exc.perl_text()) from None
            except FormatError as exc:
                raise ConfError(f"{exc}\n") from None
        return value
    raise ConfError("internal error")


# --------------------------------------------------------------------------- lxc.* keys

_VALID_LXC_KEYS: dict[str, int | str] = dict.fromkeys(
    [
        "lxc.apparmor.profile",
        "lxc.apparmor.allow_incomplete",
        "lxc.apparmor.allow_nesting",
        "lxc.apparmor.raw",
        "lxc.selinux.context",
        "lxc.include",
        "lxc.arch",
        "lxc.uts.name",
        "lxc.signal.halt",
        "lxc.signal.reboot",
        "lxc.signal.stop",
        "lxc.init.cmd",
        "lxc.init.cwd",
        "lxc.init.uid",
        "lxc.init.gid",
        "lxc.init.groups",
        "lxc.pty.max",
        "lxc.console.logfile",
        "lxc.console.path",
        "lxc.tty.max",
        "lxc.devtty.dir",
        "lxc.hook.autodev",
        "lxc.autodev",
        "lxc.kmsg",
        "lxc.mount.fstab",
        "lxc.mount.entry",
        "lxc.mount.auto",
        "lxc.rootfs.mount",
        "lxc.cap.drop",
        "lxc.cap.keep",
        "lxc.seccomp.profile",
        "lxc.seccomp.notify.proxy",
        "lxc.seccomp.notify.cookie",
        "lxc.idmap",
        "lxc.hook.pre-start",
        "lxc.hook.pre-mount",
        "lxc.hook.mount",
        "lxc.hook.start",
        "lxc.hook.stop",
        "lxc.hook.post-stop",
        "lxc.hook.clone",
        "lxc.hook.destroy",
        "lxc.hook.version",
        "lxc.log.level",
        "lxc.log.file",
        "lxc.start.auto",
        "lxc.start.delay",
        "lxc.start.order",
        "lxc.group",
        "lxc.environment",
        "lxc.environment.runtime",
        "lxc.environment.hooks",
        "lxc.sysctl.fs.mqueue",
        "lxc.sysctl.kernel.msgmax",
        "lxc.sysctl.kernel.msgmnb",
        "lxc.sysctl.kernel.msgmni",
        "lxc.sysctl.kernel.sem",
        "lxc.sysctl.kernel.shmall",
        "lxc.sysctl.kernel.shmmax",
        "lxc.sysctl.kernel.shmmni",
        "lxc.sysctl.kernel.shm_rmid_forced",
    ],
    1,
)
_VALID_LXC_KEYS["lxc.rootfs.path"] = "lxc.rootfs.path is auto generated from rootfs"
_VALID_LXC_KEYS["lxc.rootfs.options"] = (
    'lxc.rootfs.options is not supported, please use mount point options in the "rootfs" key'
)
_DEPRECATED_LXC_KEYS = {
    "lxc.aa_profile": "lxc.apparmor.profile",
    "lxc.aa_allow_incomplete": "lxc.apparmor.allow_incomplete",
    "lxc.console": "lxc.console.path",
    "lxc.devttydir": "lxc.tty.dir",
    "lxc.haltsignal": "lxc.signal.halt",
    "lxc.rebootsignal": "lxc.signal.reboot",
    "lxc.stopsignal": "lxc.signal.stop",
    "lxc.id_map": "lxc.idmap",
    "lxc.init_cmd": "lxc.init.cmd",
    "lxc.loglevel": "lxc.log.level",
    "lxc.logfile": "lxc.log.file",
    "lxc.mount": "lxc.mount.fstab",
    "lxc.network.type": "lxc.net.INDEX.type",
    "lxc.network.flags": "lxc.net.INDEX.flags",
    "lxc.network.link": "lxc.net.INDEX.link",
    "lxc.network.mtu": "lxc.net.INDEX.mtu",
    "lxc.network.name": "lxc.net.INDEX.name",
    "lxc.network.hwaddr": "lxc.net.INDEX.hwaddr",
    "lxc.network.ipv4": "lxc.net.INDEX.ipv4.address",
    "lxc.network.ipv4.gateway": "lxc.net.INDEX.ipv4.gateway",
    "lxc.network.ipv6": "lxc.net.INDEX.ipv6.address",
    "lxc.network.ipv6.gateway": "lxc.net.INDEX.ipv6.gateway",
    "lxc.network.script.up": "lxc.net.INDEX.script.up",
    "lxc.network.script.down": "lxc.net.INDEX.script.down",
    "lxc.pts": "lxc.pty.max",
    "lxc.se_context": "lxc.selinux.context",
    "lxc.seccomp": "lxc.seccomp.profile",
    "lxc.tty": "lxc.tty.max",
    "lxc.utsname": "lxc.uts.name",
}


def is_valid_lxc_conf_key(vmid: int, key: str, warnings: list[str]) -> int | str:
    """pve-container Config.pm ``is_valid_lxc_conf_key``: 1, 0, or the refusal text."""
    if key.startswith("lxc.limit."):
        warnings.append(f"vm {vmid} - {key}: lxc.limit.* was renamed to lxc.prlimit.*")
        return 1
    if key in _DEPRECATED_LXC_KEYS:
        warnings.append(
            f"vm {vmid} - {key} is deprecated and was renamed to {_DEPRECATED_LXC_KEYS[key]}"
        )
        return 1
    if key in _VALID_LXC_KEYS:
        return _VALID_LXC_KEYS[key]
    if key.startswith("lxc.cgroup."):
        warnings.append(
            f"vm {vmid} - {key} is deprecated, this will be a hard error in the future!"
        )
        return 1
    if key.startswith(("lxc.cgroup2.", "lxc.prlimit.", "lxc.net.")):
        return 1
    return 0


# --------------------------------------------------------------------------- parse / write


def read_conf(path: os.PathLike[str] | str) -> str:
    """A conf's text byte for byte (pmxcfs hands PVE the raw bytes: no newline
    translation; bytes that are not UTF-8 survive as surrogates)."""
    with open(path, "rb") as fh:
        return fh.read().decode("utf-8", "surrogateescape")


def conf_bytes(text: str) -> bytes:
    """The bytes of a conf text read by :func:`read_conf` (the inverse)."""
    return text.encode("utf-8", "surrogateescape")


def _digest(raw: str) -> str:
    """``Digest::SHA::sha1_hex($raw)`` of the file's bytes."""
    return hashlib.sha1(conf_bytes(raw), usedforsecurity=False).hexdigest()


def _perl_lines(raw: str) -> list[str]:
    """Perl's ``split(/\\n/, $raw)`` (trailing empty fields dropped)."""
    lines = raw.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def parse_pct_config(  # noqa: PLR0912, PLR0915  (one pass, in PVE's order)
    vmid: int, raw: str, *, strict: bool = False
) -> GuestConf:
    """pve-container Config.pm ``parse_pct_config``, line by line in its order."""
    res = GuestConf(Section(), Section(), {}, _digest(raw))
    conf = res.main
    descr = ""
    section = ""

    def handle_error(msg: str) -> None:
        if strict:
            raise ConfError(msg)
        res.warnings.append(msg.rstrip("\n"))

    for line in _perl_lines(raw):
        if re.match(r"^\s*$", line):
            continue
        if re.match(r"^\[pve:pending\]\s*$", line, re.IGNORECASE):
            section = "pending"
            if descr:
                conf.options["description"] = descr
            descr = ""
            conf = res.pending = Section()
            continue
        m = re.match(r"^\[([a-z][a-z0-9_\-]+)\]\s*$", line, re.IGNORECASE)
        if m:
            section = m.group(1)
            if descr:
                conf.options["description"] = descr
            descr = ""
            conf = res.snapshots[section] = Section()
            continue
        m = re.match(r"^\#(.*)$", line)
        if m:
            descr += decode_text(m.group(1)) + "\n"
            continue
        m = re.match(r"^(lxc\.[a-z0-9_\-\.]+)(:|\s*=)\s*(.*?)\s*$", line)
        if m:
            key, value = m.group(1), m.group(3)
            validity = is_valid_lxc_conf_key(vmid, key, res.warnings)
            if key == "lxc.environment.runtime":
                env = conf.options.get("env")
                conf.options["env"] = value if env is None else f"{env}\0{value}"
            elif validity == 1:
                conf.lxc.append((key, value))
            elif validity:
                handle_error(f"vm {vmid} - {key}: {validity}\n")
            else:
                handle_error(f"vm {vmid} - unable to parse config: {line}\n")
            continue
        m = re.match(r"^(description):\s*(.*\S)\s*$", line)
        if m:
            descr += decode_text(m.group(2))
            continue
        m = re.search(r"snapstate:\s*(prepare|delete)\s*$", line)
        if m:
            conf.options["snapstate"] = m.group(1)
            continue
        m = re.match(r"^delete:\s*(.*\S)\s*$", line)
        if m:
            if section == "pending":
                conf.options["delete"] = m.group(1)
            else:
                handle_error(f"vm {vmid} - property 'delete' is only allowed in [pve:pending]\n")
            continue
        m = re.match(r"^([a-z][a-z_]*\d*):\s*(.+?)\s*$", line)
        if m:
            key, value = m.group(1), m.group(2)
            try:
                value = check_type("lxc", key, value)
            except (ConfError, SchemaUnsupported) as exc:
                handle_error(f"vm {vmid} - unable to parse value of '{key}' - {exc}")
            conf.options[key] = value
            continue
        handle_error(f"vm {vmid} - unable to parse config: {line}\n")
    if descr:
        conf.options["description"] = descr
    res.main.options.pop("snapstate", None)
    return res


def _generate_raw(section: Section) -> str:
    """The inner ``$generate_raw_config`` of pve-container ``write_pct_config``."""
    raw = ""
    descr = section.options.get("description") or ""
    if descr == "0":  # Perl: '0' is false
        descr = ""
    for line in _perl_lines(descr):
        raw += f"#{encode_text(line)}\n"
    for key in sorted(section.options):
        if key in ("digest", "description", "pending", "snapshots", "snapname", "env", "lxc"):
            continue
        value = section.options[key]
        if "\n" in value:
            raise ConfError(f"detected invalid newline inside property '{key}'\n")
        raw += f"{key}: {value}\n"
    env = section.options.get("env")
    if env:
        for variable in re.split(r"\0+", env):
            raw += f"lxc.environment.runtime: {variable}\n"
    for key, value in section.lxc:
        if key != "lxc.environment.runtime":
            raw += f"{key}: {value}\n"
    return raw


def write_pct_config(conf: GuestConf) -> str:
    """pve-container Config.pm ``write_pct_config``: description as ``#`` lines, options
    sorted, ``env``, raw ``lxc`` pairs; then ``[pve:pending]``; then snapshots sorted.
    (Its removal of ``unusedN`` entries whose volume is still in use is left out: the
    stand-in never writes those.)"""
    conf.main.options.pop("snapstate", None)
    raw = _generate_raw(conf.main)
    if conf.pending:
        raw += "\n[pve:pending]\n" + _generate_raw(conf.pending)
    for name in sorted(conf.snapshots):
        raw += f"\n[{name}]\n" + _generate_raw(conf.snapshots[name])
    return raw


def parse_vm_config(  # noqa: PLR0912, PLR0915  (one pass, in PVE's order)
    vmid: int, raw: str, *, strict: bool = False
) -> GuestConf:
    """qemu-server QemuServer.pm ``parse_vm_config`` (types checked, formats not: see the
    module docstring; drive values are not rewritten by ``parse_drive``)."""
    res = GuestConf(Section(), Section(), {}, _digest(raw))
    conf: Section | None = res.main
    descr: str | None = None
    section_name, section_type = "", "main"
    seen_pending = False

    def handle_error(msg: str) -> None:
        if strict:
            raise ConfError(msg)
        res.warnings.append(msg.rstrip("\n"))

    def finish_description() -> None:
        nonlocal descr
        if descr is not None and conf is not None:
            conf.options["description"] = re.sub(r"\s+$", "", descr)
        descr = None

    for line in _perl_lines(raw):
        if re.match(r"^\s*$", line):
            continue
        if re.match(r"^\[PENDING\]\s*$", line, re.IGNORECASE):
            finish_description()
            if seen_pending:
                handle_error(f"vm {vmid} - duplicate section: pending\n")
            seen_pending = True
            section_name, section_type = "pending", "pending"
            conf = res.pending = Section()
            continue
        m = re.match(r"^\[special:(cloudinit|fleecing)\]\s*$", line, re.IGNORECASE)
        if m:
            finish_description()
            section_name, section_type = m.group(1), "special"
            conf = Section()  # kept apart by PVE; not used by the stand-in
            continue
        m = re.match(r"^\[([a-z][a-z0-9_\-]+)\]\s*$", line, re.IGNORECASE)
        if m:
            finish_description()
            if m.group(1) in res.snapshots:
                handle_error(f"vm {vmid} - duplicate snapshot section: {m.group(1)}\n")
            section_name, section_type = m.group(1), "snapshot"
            conf = res.snapshots[m.group(1)] = Section()
            continue
        m = re.match(r"^\[([^\]]*)\]\s*$", line, re.IGNORECASE)
        if m:
            finish_description()
            conf = None
            handle_error(f"vm {vmid} - skipping unknown section: '{m.group(1)}'\n")
            continue
        if conf is None:
            continue
        m = re.match(r"^\#(.*)$", line)
        if m:
            descr = (descr or "") + decode_text(m.group(1)) + "\n"
            continue
        if m := re.match(r"^(description):\s*(.*\S)\s*$", line):
            descr = (descr or "") + decode_text(m.group(2))
        elif m := re.search(r"snapstate:\s*(prepare|delete)\s*$", line):
            conf.options["snapstate"] = m.group(1)
        elif m := re.match(r"^(args):\s*(.*\S)\s*$", line):
            conf.options["args"] = m.group(2)
        elif m := re.match(r"^delete:\s*(.*\S)\s*$", line):
            if section_name == "pending" and section_type == "pending":
                conf.options["delete"] = m.group(1)
            else:
                handle_error(f"vm {vmid} - property 'delete' is only allowed in [PENDING]\n")
        elif m := re.match(r"^([a-z][a-z_\-]*\d*):\s*(.+?)\s*$", line):
            key, value = m.group(1), m.group(2)
            if section_type == "special":
                conf.options[key] = value
                continue
            try:
                value = check_type("qemu", key, value, formats=False)
            except ConfError as exc:
                handle_error(f"vm {vmid} - unable to parse value of '{key}' - {exc}")
            else:
                conf.options["ide2" if key == "cdrom" else key] = value
        else:
            handle_error(f"vm {vmid} - unable to parse config: {line}\n")
    finish_description()
    res.main.options.pop("snapstate", None)
    return res


# ------------------------------------------------------------ pending (AbstractConfig.pm)


def parse_pending_delete(data: str | None) -> dict[str, bool]:
    """``parse_pending_delete``: ``{key: force}``."""
    if not data:
        return {}
    text = re.sub(r"[,;]", " ", data).lstrip()
    out: dict[str, bool] = {}
    entries = re.split(r"\s+", text) if text else []
    while entries and entries[-1] == "":  # Perl's split drops trailing empty fields
        entries.pop()
    for entry in entries:
        m = re.match(r"^(!?)(.*)$", entry)
        assert m is not None
        out[m.group(2)] = bool(m.group(1))
    return out


def print_pending_delete(deletes: Mapping[str, bool]) -> str:
    return ",".join(("!" if deletes[k] else "") + k for k in sorted(deletes))


def add_to_pending_delete(conf: GuestConf, key: str, force: bool = False) -> None:
    deletes = parse_pending_delete(conf.pending.options.get("delete"))
    deletes[key] = force
    conf.pending.options["delete"] = print_pending_delete(deletes)


def remove_from_pending_delete(conf: GuestConf, key: str) -> None:
    deletes = parse_pending_delete(conf.pending.options.get("delete"))
    if key not in deletes:
        return
    del deletes[key]
    if deletes:
        conf.pending.options["delete"] = print_pending_delete(deletes)
    else:
        conf.pending.options.pop("delete", None)


def cleanup_pending(conf: GuestConf) -> bool:
    """Drop pending values equal to the current ones and deletes of unset keys."""
    changes = False
    for key in list(conf.pending.options):
        if key == "delete":
            continue
        if key in conf.main.options and conf.pending.options[key] == conf.main.options[key]:
            changes = True
            del conf.pending.options[key]
    current = parse_pending_delete(conf.pending.options.get("delete"))
    kept = {k: f for k, f in current.items() if k in conf.main.options}
    changes = changes or len(kept) != len(current)
    if kept:
        conf.pending.options["delete"] = print_pending_delete(kept)
    else:
        conf.pending.options.pop("delete", None)
    return changes


def current_config(conf: GuestConf, *, current: bool = False) -> dict[str, str]:
    """``load_current_config``: the main options with pending values and deletes applied
    unless ``current`` (what ``GET .../config`` answers, before ``lxc`` and ``digest``)."""
    out = dict(conf.main.options)
    if not current:
        for key, value in conf.pending.options.items():
            if key != "delete":
                out[key] = value
        for key in parse_pending_delete(conf.pending.options.get("delete")):
            if out.get(key):
                del out[key]
    return out


# LXC_FASTPLUG_OPTIONS of pve-container Config.pm: applied at once even while running.
LXC_FASTPLUG_OPTIONS = frozenset(
    (
        "description",
        "onboot",
        "startup",
        "protection",
        "hostname",
        "hookscript",
        "cores",
        "tags",
        "lock",
    )
)


# --------------------------------------------------------------------------- volumes, devices, nets


def _put_format(key: str) -> Mapping[str, Any]:
    props = find_endpoint("PUT", "/nodes/{node}/lxc/{vmid}/config").properties
    fmt: Mapping[str, Any] = props[key]["format"]
    return fmt


def _parse(fmt: Mapping[str, Any], data: str) -> dict[str, Any]:
    try:
        return parse_property_string(fmt, data)
    except PropertyStringError as exc:
        raise ConfError(exc.perl_text()) from None
    except FormatError as exc:
        raise ConfError(f"{exc}\n") from None


def classify_mountpoint(volume: str) -> str:
    """Config.pm ``classify_mountpoint``: ``device`` (/dev/...), ``bind`` (another absolute
    path) or ``volume`` (a storage volume)."""
    if volume.startswith("/"):
        return "device" if volume.startswith("/dev/") else "bind"
    return "volume"


def _parse_size(value: str) -> int | None:
    """pve-common JSONSchema.pm ``parse_size``: bytes."""
    m = re.match(r"^(\d+(\.\d+)?)([KMGT](?:iB)?)?$", value)
    if not m:
        return None
    size = float(m.group(1))
    unit = (m.group(3) or "")[:1]
    factor = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}[unit]
    return int(size * factor)


def parse_volume(key: str, value: str) -> dict[str, Any]:
    """Config.pm ``parse_volume`` / ``$parse_ct_mountpoint_full``: the property string of
    ``rootfs`` (``mp`` is ``/``), ``mpN`` or ``unusedN``; ``size`` in bytes; ``type``."""
    if key == "rootfs":
        fmt = _put_format("rootfs")
    elif re.fullmatch(r"mp\d+", key):
        fmt = _put_format("mp[n]")
    elif re.fullmatch(r"unused\d+", key):
        fmt = _put_format("unused[n]")
    else:
        raise ConfError(f"parse_volume - unknown type: {key}\n")
    res = _parse(fmt, value)
    if res.get("size") is not None:
        size = _parse_size(str(res["size"]))
        if size is None:
            raise ConfError(f"invalid size: {res['size']}\n")
        res["size"] = size
    res["type"] = classify_mountpoint(str(res.get("volume", "")))
    if key == "rootfs":
        res["mp"] = "/"
    return res


def print_volume(key: str, volume: Mapping[str, Any]) -> str:
    """Config.pm ``print_ct_mountpoint`` (``type`` skipped; ``mp`` too for rootfs)."""
    fmt = _put_format("rootfs" if key == "rootfs" else "mp[n]")
    data = {k: v for k, v in volume.items() if k != "type" and not (key == "rootfs" and k == "mp")}
    return print_property_string(data, fmt)


def parse_device(value: str) -> dict[str, Any]:
    """Config.pm ``parse_device``: the ``devN`` property string; a path is required."""
    res = _parse(_put_format("dev[n]"), value)
    if res.get("path") is None:
        raise ConfError("Path has to be defined\n")
    return res


def parse_lxc_network(value: str) -> dict[str, Any]:
    """Config.pm ``parse_lxc_network`` (without the random ``hwaddr`` PVE adds when none
    is set: the stand-in builds no veth)."""
    if not value:
        return {}
    res = _parse(_put_format("net[n]"), value)
    res["type"] = "veth"
    return res


# --------------------------------------------------------------------------- lock


def config_lock_path(node_root: str, vmid: int) -> str:
    """Config.pm ``config_file_lock``: ``/run/lock/lxc/pve-config-<vmid>.lock``."""
    return os.path.join(node_root, "run/lock/lxc", f"pve-config-{vmid}.lock")


@contextlib.contextmanager
def lock_config(node_root: str, vmid: int, timeout: float = 10) -> Iterator[None]:
    """``PVE::AbstractConfig::lock_config`` (10 s) -> ``PVE::Tools::lock_file_full``:
    an exclusive flock on the per-guest lock file, "can't lock file '<path>' - got
    timeout" when it cannot be had in time. The same file as the conf-editing modules'
    lock, so both exclude each other as on PVE."""
    path = config_lock_path(node_root, vmid)
    with flock_within(
        path, timeout, error=lambda p: ConfError(f"can't lock file '{p}' - got timeout")
    ):
        yield


def split_nameservers(value: str) -> str:
    """LXC.pm ``verify_nameserver_list`` / ``verify_searchdomain_list``: the list as PVE
    stores it (space-separated)."""
    return " ".join(split_list(value))
