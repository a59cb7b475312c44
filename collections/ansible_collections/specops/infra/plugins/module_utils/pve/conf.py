"""The one parser/writer for Proxmox VE guest config files.

Covers ``/etc/pve/lxc/<vmid>.conf`` and ``/etc/pve/qemu-server/<vmid>.conf``:

- ``key: value`` lines (``devN``, ``mpN``, ``hostpciN``, ``rootfs``, ...);
- raw LXC keys (``lxc.cgroup2.devices.allow: c 195:* rwm``), which may repeat and whose
  order matters; PVE also reads the ``lxc.key = value`` spelling;
- ``#`` comment lines, which PVE uses to store the guest description (``%XX`` escaped);
- blank lines;
- sections: snapshots ``[name]`` and pending changes (``[pve:pending]`` in a container's
  config, ``[PENDING]`` in a VM's: ``kind="qemu"``).

Reading follows PVE's parsers (pve-container ``PVE::LXC::Config::parse_pct_config``,
qemu-server ``PVE::QemuServer::parse_vm_config``): a line PVE would not apply (an ``lxc.*``
key PVE does not know or refuses, ``delete:`` outside the pending section, a one-letter
``[x]`` header, a ``snapstate:`` line in the main section) is kept byte for byte but not
read as an option. ``tests/lab/test_pve_conf_grammar.py`` runs this parser and the lab
stand-in's own (independent) reader over the same confs.

``parse(text).render() == text`` for every input (byte-lossless: every line keeps its
raw text, including odd spacing, CRLF endings and lines PVE itself would warn about).
Edits go through :class:`PveConf` and touch only the main section (before the first
``[section]`` header); snapshot and pending sections are never rewritten. A file without
a final newline keeps that through any edit (an added line gets no newline of its own;
taking it away again gives the original bytes back).

What PVE derives from a container's options, read here the way PVE reads it (one home):
:meth:`PveConf.get_bool` (``1|0``, ``yes|no``, ``on|off``, ``true|false``, any case; a
later line replaces an earlier one only when PVE can read it), :meth:`PveConf.id_map`
(``lxc.idmap`` lines, else PVE's default map for an unprivileged container) and
:attr:`PveConf.user_namespace`. ``tests/unit/test_pve_fixtures.py`` runs every container
and VM config of Proxmox's own test suites through this module.

Stdlib only: this runs on managed hosts (Python >= 3.7, like ``gpu``, which reads VM
configs through it).
"""

from __future__ import annotations

import contextlib
import os
import re
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ansible_collections.specops.infra.plugins.module_utils.atomic_file import write_atomic
from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError
from ansible_collections.specops.infra.plugins.module_utils.file_lock import flock_within

__all__ = [
    "DEFAULT_ID_MAP",
    "Line",
    "PveConf",
    "PveConfError",
    "Section",
    "config_lock",
    "format_property_string",
    "parse",
    "parse_property_string",
    "write_conf_atomic",
]

# pve-container parse_pct_config: keys `^([a-z][a-z_]*\d*):\s*(.+?)\s*$` (qemu-server's
# parse_vm_config also allows '-'); raw LXC keys `^(lxc\.[a-z0-9_\-\.]+)(:|\s*=)\s*(.*?)\s*$`;
# snapshots `^\[([a-z][a-z0-9_\-]+)\]\s*$` (two characters at least); pending
# `^\[pve:pending\]\s*$` (containers) or `^\[PENDING\]\s*$` (VMs), case-insensitive.
_KEY_RE = {
    "lxc": re.compile(r"^([a-z][a-z_]*\d*):\s*(.*?)\s*$"),
    "qemu": re.compile(r"^([a-z][a-z_\-]*\d*):\s*(.*?)\s*$"),
}
_LXC_RE = re.compile(r"^(lxc\.[a-z0-9_\-.]+)(?::|\s*=)\s*(.*?)\s*$")
_SECTION_RE = re.compile(r"^\[([a-z][a-z0-9_\-]+|pve:pending)\]\s*$", re.IGNORECASE)
_SNAPSTATE_RE = re.compile(r"snapstate:\s*(prepare|delete)\s*$")
# pve-container Config.pm is_valid_lxc_conf_key: known keys, then prefixes it allows.
_LXC_KEYS = frozenset(
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
        "lxc.aa_profile",
        "lxc.aa_allow_incomplete",
        "lxc.console",
        "lxc.devttydir",
        "lxc.haltsignal",
        "lxc.rebootsignal",
        "lxc.stopsignal",
        "lxc.id_map",
        "lxc.init_cmd",
        "lxc.loglevel",
        "lxc.logfile",
        "lxc.mount",
        "lxc.network.type",
        "lxc.network.flags",
        "lxc.network.link",
        "lxc.network.mtu",
        "lxc.network.name",
        "lxc.network.hwaddr",
        "lxc.network.ipv4",
        "lxc.network.ipv4.gateway",
        "lxc.network.ipv6",
        "lxc.network.ipv6.gateway",
        "lxc.network.script.up",
        "lxc.network.script.down",
        "lxc.pts",
        "lxc.se_context",
        "lxc.seccomp",
        "lxc.tty",
        "lxc.utsname",
    ]
)
_LXC_PREFIXES = ("lxc.limit.", "lxc.cgroup.", "lxc.cgroup2.", "lxc.prlimit.", "lxc.net.")
_BOOLEAN_TRUE = re.compile(r"^(1|on|yes|true)$", re.IGNORECASE)
_BOOLEAN_FALSE = re.compile(r"^(0|off|no|false)$", re.IGNORECASE)
_SNAPNAME_RE = re.compile(r"^[a-z][a-z0-9_\-]+$", re.IGNORECASE)
_SETKEY_RE = re.compile(r"^[a-z][a-z_\-]*\d*$")
_LXCKEY_RE = re.compile(r"^lxc\.[a-z0-9_\-.]+$")
# pve-container PVE::LXC::parse_id_maps: `^([ug])\s+(\d+)\s+(\d+)\s+(\d+)\s*$`.
_IDMAP_RE = re.compile(r"^([ug])\s+(\d+)\s+(\d+)\s+(\d+)\s*$", re.ASCII)

PENDING_SECTION = "pve:pending"
# What PVE maps an unprivileged container's ids to when its conf has no lxc.idmap line
# (pve-container PVE::LXC::parse_id_maps and update_lxc_config): (kind, container id,
# host id, count).
DEFAULT_ID_MAP: tuple[tuple[str, int, int, int], ...] = (
    ("u", 0, 100000, 65536),
    ("g", 0, 100000, 65536),
)


class PveConfError(ValidationError, ValueError):
    """A config text or an edit that PVE would not accept; names the line or key."""


@dataclass
class Line:
    """One line with its raw text (line ending included, if any).

    ``kind`` is ``key`` (PVE option), ``lxc`` (raw LXC key), ``comment``, ``blank``,
    ``section`` (a ``[name]`` header) or ``invalid`` (kept as is; PVE would warn).
    """

    raw: str
    kind: str
    key: str = ""
    value: str = ""

    @property
    def eol(self) -> str:
        if self.raw.endswith("\r\n"):
            return "\r\n"
        if self.raw.endswith("\n"):
            return "\n"
        return ""


@dataclass
class Section:
    """The main section (``name`` None) or a snapshot/pending section with its header."""

    name: str | None
    lines: list[Line] = field(default_factory=list)

    def items(self) -> dict[str, str]:
        """PVE options of this section (raw ``lxc.*`` keys excluded); the last one wins."""
        return {ln.key: ln.value for ln in self.lines if ln.kind == "key"}

    def lxc(self) -> list[tuple[str, str]]:
        """Raw LXC keys in file order, repeats kept."""
        return [(ln.key, ln.value) for ln in self.lines if ln.kind == "lxc"]


def _split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only (``str.splitlines`` would also split on \\x0b, \\x1c, ...)."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _valid_lxc_key(key: str) -> bool:
    return key in _LXC_KEYS or key.startswith(_LXC_PREFIXES)


def _without(text: str, suffix: str) -> str:
    """``text`` without ``suffix`` at its end (``str.removesuffix`` is Python 3.9+)."""
    return text[: -len(suffix)] if suffix and text.endswith(suffix) else text


def _classify(raw: str, section: str | None, kind: str) -> Line:  # noqa: PLR0911
    body = _without(raw.rstrip("\n"), "\r")
    if body.strip() == "":
        return Line(raw, "blank")
    m = _SECTION_RE.match(body)
    if kind == "qemu":  # [PENDING], [special:...] and unknown sections end the main one
        m = re.match(r"^\[([^\]]*)\]\s*$", body)
        if m and m.group(1).upper() == "PENDING":
            return Line(raw, "section", key=PENDING_SECTION)
    if m:
        name = m.group(1)
        return Line(
            raw, "section", key=PENDING_SECTION if name.lower() == PENDING_SECTION else name
        )
    if body.startswith("#"):
        # parse_pct_config's `^\#(.*)$` keeps a CR before the newline in the description
        return Line(raw, "comment", value=_without(raw, "\n")[1:])
    m = _LXC_RE.match(body)
    if m and kind == "lxc":
        if not _valid_lxc_key(m.group(1)):
            return Line(raw, "invalid", value=body)
        return Line(raw, "lxc", key=m.group(1), value=m.group(2))
    if re.match(r"^description:\s*(.*\S)\s*$", body):
        return Line(raw, "description", key="description", value=body.split(":", 1)[1].strip())
    m = _SNAPSTATE_RE.search(body)
    if m:  # PVE reads it anywhere in the line; in the main section it is dropped
        if section is None:
            return Line(raw, "invalid", value=body)
        return Line(raw, "key", key="snapstate", value=m.group(1))
    if re.match(r"^delete:", body) and section != PENDING_SECTION:
        return Line(raw, "invalid", value=body)
    m = _KEY_RE[kind].match(body)
    if m and m.group(2) != "":
        return Line(raw, "key", key=m.group(1), value=m.group(2))
    return Line(raw, "invalid", value=body)


def parse(text: str, *, strict: bool = False, kind: str = "lxc") -> PveConf:
    """Parse a PVE guest config (``kind``: ``lxc`` or ``qemu``). ``strict`` raises on
    lines PVE would warn about."""
    if kind not in _KEY_RE:
        raise PveConfError("kind", f"want 'lxc' or 'qemu' (got {kind!r})")
    sections: list[Section] = [Section(None)]
    seen: set[str] = set()
    for number, raw in enumerate(_split_lines(text), start=1):
        line = _classify(raw, sections[-1].name, kind)
        if line.kind == "section":
            if strict and line.key in seen:
                raise PveConfError(f"line {number}", f"duplicate section [{line.key}]")
            seen.add(line.key)
            sections.append(Section(line.key, [line]))
            continue
        if strict and line.kind == "invalid":
            raise PveConfError(
                f"line {number}",
                f"unable to parse {line.value!r} (want 'key: value', a known 'lxc.key: value', "
                "'# comment', a blank line or '[section]'; 'delete:' only in the pending section)",
            )
        sections[-1].lines.append(line)
    return PveConf(sections, final_newline=text == "" or text.endswith("\n"))


def _decode_comment(text: str) -> str:
    return urllib.parse.unquote(text)


def _encode_comment(text: str) -> str:
    # PVE::Tools::encode_text: escape control/high characters and ':'.
    return "".join(
        ch if (0x20 <= ord(ch) <= 0x7E and ch not in ":%") else urllib.parse.quote(ch, safe="")
        for ch in text
    )


class PveConf:
    """A parsed config. Read anything; edit the main section only."""

    def __init__(self, sections: list[Section], *, final_newline: bool = True) -> None:
        self.sections = sections
        # False when the parsed text did not end in a newline: render() then leaves the
        # last line without one, whatever the edits (PVE's own writer always ends in a
        # newline, but a hand-written file stays as it was written).
        self.final_newline = final_newline

    # -- reading -----------------------------------------------------------------------
    @property
    def main(self) -> Section:
        return self.sections[0]

    def render(self) -> str:
        lines = [ln.raw for sec in self.sections for ln in sec.lines]
        text = "".join(lines)
        # A blank last line is all newline: dropping it would drop the line, so it stays.
        if not self.final_newline and lines and lines[-1].strip("\r\n"):
            for eol in ("\r\n", "\n"):
                if text.endswith(eol):
                    return text[: -len(eol)]
        return text

    def snapshot_names(self) -> list[str]:
        return [s.name for s in self.sections[1:] if s.name and s.name != PENDING_SECTION]

    def section(self, name: str) -> Section:
        for sec in self.sections[1:]:
            if sec.name == name:
                return sec
        raise PveConfError(name, f"no such section (have: {', '.join(self._names()) or 'none'})")

    def _names(self) -> list[str]:
        return [s.name for s in self.sections[1:] if s.name]

    def items(self) -> dict[str, str]:
        """Main-section PVE options (no raw ``lxc.*`` keys, no description)."""
        return self.main.items()

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.items().get(key, default)

    def lxc(self) -> list[tuple[str, str]]:
        """Main-section raw LXC keys, in order, repeats kept."""
        return self.main.lxc()

    @property
    def description(self) -> str | None:
        """The description PVE reads from the main section: its ``#`` lines (one line
        each) and ``description:`` lines (appended as they are), or None."""
        text = ""
        for ln in self.main.lines:
            if ln.kind == "comment":
                text += _decode_comment(ln.value) + "\n"
            elif ln.kind == "description":
                text += _decode_comment(ln.value)
        return _without(text, "\n") if text else None

    def get_bool(self, key: str, default: bool = False) -> bool:
        """A boolean option as PVE reads it: ``check_type`` takes ``1|on|yes|true`` /
        ``0|off|no|false`` (any case); a line it cannot read is dropped with a warning,
        so it does not replace an earlier readable line of the same key (pve-container
        ``parse_pct_config``, qemu-server ``parse_vm_config``). ``default`` when no
        readable line is left."""
        result = default
        for ln in self.main.lines:
            if ln.kind != "key" or ln.key != key:
                continue
            if _BOOLEAN_TRUE.match(ln.value):
                result = True
            elif _BOOLEAN_FALSE.match(ln.value):
                result = False
        return result

    def id_map(self) -> list[tuple[str, int, int, int]]:
        """The container's id map as PVE applies it: (``u``/``g``, container id, host id,
        count) for each main-section ``lxc.idmap`` line, in file order; without such a
        line, :data:`DEFAULT_ID_MAP` for an unprivileged container and nothing (host ids)
        for a privileged one (pve-container ``PVE::LXC::parse_id_maps``).

        A line PVE cannot read (it refuses to start the container) raises PveConfError.
        """
        out: list[tuple[str, int, int, int]] = []
        for key, value in self.lxc():
            if key != "lxc.idmap":
                continue
            m = _IDMAP_RE.match(value)
            if not m:
                raise PveConfError(
                    "lxc.idmap",
                    f"failed to parse idmap: {value!r} (want 'u|g <container id> <host id> "
                    "<count>', e.g. 'g 0 100000 65536'); PVE does not start the container",
                )
            out.append((m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))))
        if not out and self.get_bool("unprivileged"):
            return list(DEFAULT_ID_MAP)
        return out

    @property
    def user_namespace(self) -> bool:
        """Whether PVE starts the container in a user namespace (its root is not the
        host's): ``unprivileged`` set, or any ``lxc.idmap`` line (pve-container
        ``PVE::LXC::update_lxc_config``: ``$conf->{unprivileged} || $custom_idmap``)."""
        return self.get_bool("unprivileged") or any(k == "lxc.idmap" for k, _value in self.lxc())

    def indexed(self, prefix: str) -> dict[int, str]:
        """``devN``/``mpN``/``hostpciN``/``netN`` entries of the main section by N."""
        pattern = re.compile(rf"^{re.escape(prefix)}(\d+)$")
        out: dict[int, str] = {}
        for key, value in self.items().items():
            m = pattern.match(key)
            if m:
                out[int(m.group(1))] = value
        return dict(sorted(out.items()))

    # -- editing (main section only) ---------------------------------------------------
    def _eol(self) -> str:
        for sec in self.sections:
            for ln in sec.lines:
                if ln.eol:
                    return ln.eol
        return "\n"

    def _insert_at(self) -> int:
        """Index in the main section after its last non-blank line."""
        lines = self.main.lines
        idx = len(lines)
        while idx > 0 and lines[idx - 1].kind == "blank":
            idx -= 1
        return idx

    def _insert(self, line: Line) -> None:
        """Insert ``line`` (which ends with a newline) after the last non-blank line."""
        idx = self._insert_at()
        lines = self.main.lines
        if idx > 0 and lines[idx - 1].eol == "":
            # The file's last line had no newline: give it one so the new line follows.
            prev = lines[idx - 1]
            lines[idx - 1] = Line(prev.raw + self._eol(), prev.kind, prev.key, prev.value)
        lines.insert(idx, line)

    def set(self, key: str, value: str) -> bool:
        """Set a PVE option in the main section; returns whether the text changed.

        An existing line is rewritten in place (first one; later duplicates removed);
        a new key goes after the main section's last non-blank line.
        """
        if not _SETKEY_RE.match(key):
            raise PveConfError(key, "not a PVE option name (lower-case letters, '_', digits)")
        _check_value(key, value)
        eol = self._eol()
        new_raw = f"{key}: {value}{eol}"
        lines = self.main.lines
        hits = [i for i, ln in enumerate(lines) if ln.kind == "key" and ln.key == key]
        if hits:
            first = hits[0]
            old = lines[first]
            changed = old.value != value or len(hits) > 1
            if old.value != value:
                lines[first] = Line(f"{key}: {value}{old.eol}", "key", key, value)
            for i in reversed(hits[1:]):
                del lines[i]
            return changed
        self._insert(Line(new_raw, "key", key, value))
        return True

    def delete(self, key: str) -> bool:
        """Delete a PVE option (every occurrence) from the main section."""
        before = len(self.main.lines)
        self.main.lines = [ln for ln in self.main.lines if not (ln.kind == "key" and ln.key == key)]
        return len(self.main.lines) != before

    def add_lxc(self, key: str, value: str) -> None:
        """Append a raw LXC key (``lxc.*``) after the main section's last line."""
        if not _LXCKEY_RE.match(key):
            raise PveConfError(key, "raw LXC keys start with 'lxc.' (e.g. lxc.mount.entry)")
        _check_value(key, value)
        self._insert(Line(f"{key}: {value}{self._eol()}", "lxc", key, value))

    def remove_lxc(self, predicate: Callable[[str, str], bool]) -> list[tuple[str, str]]:
        """Remove main-section raw LXC lines for which ``predicate(key, value)`` holds."""
        removed: list[tuple[str, str]] = []
        kept: list[Line] = []
        for ln in self.main.lines:
            if ln.kind == "lxc" and predicate(ln.key, ln.value):
                removed.append((ln.key, ln.value))
            else:
                kept.append(ln)
        self.main.lines = kept
        return removed

    def set_description(self, text: str | None) -> None:
        """Replace the main section's comment lines (the description). The lines end in
        ``\n`` even in a CRLF file: PVE would read a CR into the description."""
        lines = [ln for ln in self.main.lines if ln.kind not in ("comment", "description")]
        if text:
            new = [
                Line(f"#{_encode_comment(part)}\n", "comment", value=_encode_comment(part))
                for part in text.split("\n")
            ]
            lines = new + lines
        self.main.lines = lines

    def __iter__(self) -> Iterator[Section]:
        return iter(self.sections)


def _check_value(key: str, value: str) -> None:
    if "\n" in value or "\r" in value:
        raise PveConfError(key, "value must be one line")
    if value.strip() != value or value == "":
        raise PveConfError(key, "value must be non-empty without leading/trailing spaces")


def parse_property_string(value: str, default_key: str | None = None) -> dict[str, str]:
    """Split ``path=/dev/x,mode=0660`` (or ``/dev/x,mode=0660`` with a default key), as
    pve-common's ``parse_property_string`` splits: on every ``,`` (no quoting), blank
    parts skipped, ``key=value`` with both sides non-empty."""
    out: dict[str, str] = {}
    for part in value.split(","):
        if part.strip() == "":
            continue
        if "=" in part:
            k, v = part.split("=", 1)
            if not k or not v:
                raise PveConfError(part, "missing key or value in comma-separated list property")
        elif default_key is not None and default_key not in out:
            k, v = default_key, part
        else:
            raise PveConfError(part, "property without '=' (and no default key left)")
        if k in out:
            raise PveConfError(k, f"duplicate key in property string {value!r}")
        out[k] = v
    return out


def format_property_string(props: dict[str, str], default_key: str | None = None) -> str:
    """The inverse of :func:`parse_property_string` (default key first, bare)."""
    parts: list[str] = []
    if default_key is not None and default_key in props:
        parts.append(props[default_key])
    parts.extend(f"{k}={v}" for k, v in props.items() if k != default_key)
    return ",".join(parts)


# --------------------------------------------------------------------------- files


@contextlib.contextmanager
def config_lock(root: str, vmid: int, timeout: float) -> Iterator[None]:
    """PVE's per-guest lock: flock on ``<root>/run/lock/lxc/pve-config-<vmid>.lock``."""
    path = os.path.join(root, "run/lock/lxc", f"pve-config-{vmid}.lock")
    with flock_within(
        path, timeout, error=lambda p: PveConfError("vmid", f"can't lock file '{p}' - got timeout")
    ):
        yield


def write_conf_atomic(path: str, text: str) -> None:
    """Replace a conf atomically, keeping its mode (see ``atomic_file.write_atomic``)."""
    write_atomic(path, text)
