"""The one parser/writer for Proxmox VE guest config files.

Covers ``/etc/pve/lxc/<vmid>.conf`` and ``/etc/pve/qemu-server/<vmid>.conf``:

- ``key: value`` lines (``devN``, ``mpN``, ``hostpciN``, ``rootfs``, ...);
- raw LXC keys (``lxc.cgroup2.devices.allow: c 195:* rwm``), which may repeat and whose
  order matters; PVE also reads the ``lxc.key = value`` spelling;
- ``#`` comment lines, which PVE uses to store the guest description (``%XX`` escaped);
- blank lines;
- sections: snapshots ``[name]`` and pending changes ``[pve:pending]``.

``parse(text).render() == text`` for every input (byte-lossless: every line keeps its
raw text, including odd spacing, CRLF endings and lines PVE itself would warn about).
Edits go through :class:`PveConf` and touch only the main section (before the first
``[section]`` header); snapshot and pending sections are never rewritten.

Stdlib only: this runs on managed hosts.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ansible_collections.specops.infra.plugins.module_utils.atomic_file import write_atomic

__all__ = [
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

# pve-container / qemu-server: `^([a-z][a-z_]*\d*):\s*(.*\S)\s*$`; raw LXC keys
# `^(lxc\.[a-z0-9_\-\.]+)(:|\s*=)\s*(.*?)\s*$`; sections `^\[([a-z][a-z0-9_\-]+)\]\s*$`
# and `^\[PENDING\]`/`^\[pve:pending\]`.
_KEY_RE = re.compile(r"^([a-z][a-z_\-]*\d*):\s*(.*?)\s*$")
_LXC_RE = re.compile(r"^(lxc\.[a-z0-9_\-.]+)(?::|\s*=)\s*(.*?)\s*$")
_SECTION_RE = re.compile(r"^\[([a-z][a-z0-9_\-]*|pve:pending|PENDING)\]\s*$", re.IGNORECASE)
_SNAPNAME_RE = re.compile(r"^[a-z][a-z0-9_\-]+$", re.IGNORECASE)
_SETKEY_RE = re.compile(r"^[a-z][a-z_\-]*\d*$")
_LXCKEY_RE = re.compile(r"^lxc\.[a-z0-9_\-.]+$")

PENDING_SECTION = "pve:pending"


class PveConfError(ValueError):
    """A config text or an edit that PVE would not accept; names the line or key."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


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


def _classify(raw: str) -> Line:
    body = raw.rstrip("\n").removesuffix("\r")
    if body.strip() == "":
        return Line(raw, "blank")
    if body.startswith("#"):
        return Line(raw, "comment", value=body[1:])
    m = _SECTION_RE.match(body)
    if m:
        name = m.group(1)
        if name.upper() == "PENDING":
            name = PENDING_SECTION
        return Line(raw, "section", key=name.lower() if name == PENDING_SECTION else name)
    m = _LXC_RE.match(body)
    if m:
        return Line(raw, "lxc", key=m.group(1), value=m.group(2))
    m = _KEY_RE.match(body)
    if m and m.group(2) != "":
        return Line(raw, "key", key=m.group(1), value=m.group(2))
    return Line(raw, "invalid", value=body)


def parse(text: str, *, strict: bool = False) -> PveConf:
    """Parse a PVE guest config. ``strict`` raises on lines PVE would warn about."""
    sections: list[Section] = [Section(None)]
    seen: set[str] = set()
    for number, raw in enumerate(_split_lines(text), start=1):
        line = _classify(raw)
        if line.kind == "section":
            if strict and line.key in seen:
                raise PveConfError(f"line {number}", f"duplicate section [{line.key}]")
            seen.add(line.key)
            sections.append(Section(line.key, [line]))
            continue
        if strict and line.kind == "invalid":
            raise PveConfError(
                f"line {number}",
                f"unable to parse {line.value!r} (want 'key: value', 'lxc.key: value', "
                "'# comment', a blank line or '[section]')",
            )
        sections[-1].lines.append(line)
    return PveConf(sections)


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

    def __init__(self, sections: list[Section]) -> None:
        self.sections = sections

    # -- reading -----------------------------------------------------------------------
    @property
    def main(self) -> Section:
        return self.sections[0]

    def render(self) -> str:
        return "".join(ln.raw for sec in self.sections for ln in sec.lines)

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
        """The description PVE keeps as the main section's ``#`` lines, or None."""
        comments = [ln.value for ln in self.main.lines if ln.kind == "comment"]
        if not comments:
            return None
        return "\n".join(_decode_comment(c) for c in comments)

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
        """Replace the main section's comment lines (the description)."""
        lines = [ln for ln in self.main.lines if ln.kind != "comment"]
        if text:
            eol = self._eol()
            new = [
                Line(f"#{_encode_comment(part)}{eol}", "comment", value=_encode_comment(part))
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
    """Split ``path=/dev/x,mode=0660`` (or ``/dev/x,mode=0660`` with a default key)."""
    out: dict[str, str] = {}
    for part in value.split(","):
        if part == "":
            continue
        if "=" in part:
            k, v = part.split("=", 1)
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
    lock_dir = os.path.join(root, "run/lock/lxc")
    os.makedirs(lock_dir, exist_ok=True)
    path = os.path.join(lock_dir, f"pve-config-{vmid}.lock")
    with open(path, "a") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PveConfError("vmid", f"can't lock file '{path}' - got timeout") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def write_conf_atomic(path: str, text: str) -> None:
    """Replace a conf atomically, keeping its mode (see ``atomic_file.write_atomic``)."""
    write_atomic(path, text)
