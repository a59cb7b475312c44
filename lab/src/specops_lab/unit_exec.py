"""Read a rendered systemd service unit the way systemd executes it.

Where the serving container has no systemd (the accelerator machine's LXC container
binds the host's ``/usr``, which has none), ``scripts/device/serve-gpu-device.py`` starts the
server from the unit the ``inference_service`` role renders, so the command line that
runs is the role's own. This module is systemd's side of that: it reads
``Environment=``, ``EnvironmentFile=``, ``UnsetEnvironment=``, ``RuntimeDirectory=``,
``ExecStartPre=`` and ``ExecStart=`` as systemd.exec(5) and systemd.service(5) define them:

- words are split on whitespace; a word may be double- or single-quoted, with C
  escapes (``\\"``, ``\\\\``, ``\\n``, ``\\t``) inside double quotes;
- ``%%`` is a literal ``%`` in every setting (other specifiers are refused here:
  the role renders none);
- in command lines only, ``$$`` is a literal ``$``, ``${NAME}`` is replaced by the
  variable's value within a word and a word that is exactly ``$NAME`` is split into
  the value's words (unset variables expand to nothing);
- command prefixes ``+ - @ : !`` are read (``-`` ignores a failure; ``+`` runs with
  full privileges, as root here anyway);
- ``EnvironmentFile=`` lines are ``KEY=VALUE`` with the value single-quoted
  (literal), double-quoted (``\\`` escapes) or bare; ``#`` and ``;`` lines are
  comments. A leading ``-`` on the path makes a missing file no error.

The inverse of ``specops.infra.systemd_command`` / ``systemd_quote`` and
``service_unit.render_environment_file`` (the tests check the round trips).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "SYSTEMD_PATH",
    "Command",
    "ServiceExec",
    "UnitError",
    "expand_command",
    "parse_unit",
    "read_environment_file",
    "read_files",
    "split_words",
]

# What systemd gives every system service before Environment= (systemd.exec(5),
# "Environment variables in spawned processes": PATH for the system manager).
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "s": " "}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_WHOLE_VAR = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")


class UnitError(ValueError):
    """A unit text this reader cannot execute as systemd would (it names the setting)."""


@dataclass(frozen=True)
class Command:
    """One ``Exec*=`` line: its words (before variable expansion) and prefixes."""

    words: tuple[str, ...]
    ignore_failure: bool = False
    privileged: bool = False


@dataclass
class ServiceExec:
    """What systemd would run for the ``[Service]`` section of one unit."""

    environment: dict[str, str] = field(default_factory=dict)
    environment_files: list[tuple[str, bool]] = field(default_factory=list)  # (path, optional)
    unset: list[str] = field(default_factory=list)
    exec_start_pre: list[Command] = field(default_factory=list)
    exec_start: Command | None = None
    user: str = ""
    working_directory: str = ""
    # RuntimeDirectory=: names under /run that systemd makes (owned by User=, mode
    # RuntimeDirectoryMode=, 0755 by default) before ExecStartPre= and removes at stop.
    runtime_directories: list[str] = field(default_factory=list)
    runtime_directory_mode: int = 0o755

    def runtime_paths(self) -> list[str]:
        return [f"/run/{name}" for name in self.runtime_directories]

    def final_environment(self, files: Mapping[str, str | None]) -> dict[str, str]:
        """systemd's PATH, Environment=, then each EnvironmentFile= (``files``: path ->
        text, None = missing), then UnsetEnvironment=, in systemd's order."""
        env = {"PATH": SYSTEMD_PATH, **self.environment}
        for path, optional in self.environment_files:
            text = files.get(path)
            if text is None:
                if optional:
                    continue
                raise UnitError(f"EnvironmentFile={path}: missing (systemd would refuse to start)")
            env.update(read_environment_file(text, where=f"EnvironmentFile={path}"))
        for name in self.unset:
            env.pop(name, None)
        return env

    def argv(self, env: Mapping[str, str]) -> list[str]:
        """ExecStart= with variables expanded from ``env``."""
        if self.exec_start is None:
            raise UnitError("ExecStart=: the unit has none")
        return expand_command(self.exec_start.words, env)


def _unescape_specifiers(word: str, where: str) -> str:
    out = []
    i = 0
    while i < len(word):
        if word[i] == "%":
            if word[i + 1 : i + 2] == "%":
                out.append("%")
                i += 2
                continue
            raise UnitError(f"{where}: specifier {word[i : i + 2]!r} is not supported here")
        out.append(word[i])
        i += 1
    return "".join(out)


def split_words(value: str, where: str) -> list[str]:
    """systemd's word splitting (quotes, C escapes), ``%%`` made ``%``."""
    words: list[str] = []
    i, n = 0, len(value)
    while i < n:
        while i < n and value[i] in " \t":
            i += 1
        if i >= n:
            break
        word: list[str] = []
        while i < n and value[i] not in " \t":
            c = value[i]
            if c in "\"'":
                quote, i = c, i + 1
                while i < n and value[i] != quote:
                    if value[i] == "\\" and quote == '"' and i + 1 < n:
                        esc = value[i + 1]
                        if esc not in _ESCAPES:
                            raise UnitError(f"{where}: unknown escape \\{esc}")
                        word.append(_ESCAPES[esc])
                        i += 2
                        continue
                    word.append(value[i])
                    i += 1
                if i >= n:
                    raise UnitError(f"{where}: unterminated {quote} quote")
                i += 1
                continue
            if c == "\\" and i + 1 < n:
                esc = value[i + 1]
                if esc not in _ESCAPES:
                    raise UnitError(f"{where}: unknown escape \\{esc}")
                word.append(_ESCAPES[esc])
                i += 2
                continue
            word.append(c)
            i += 1
        words.append(_unescape_specifiers("".join(word), where))
    return words


def expand_command(words: tuple[str, ...] | list[str], env: Mapping[str, str]) -> list[str]:
    """Variable expansion of a command line: ``$NAME`` alone splits, ``${NAME}`` does not,
    ``$$`` is ``$``."""
    out: list[str] = []
    for word in words:
        whole = _WHOLE_VAR.match(word)
        if whole:
            out.extend(env.get(whole.group(1), "").split())
            continue
        parts = word.split("$$")
        out.append("$".join(_VAR.sub(lambda m: env.get(m.group(1), ""), p) for p in parts))
    return out


def _command(value: str, where: str) -> Command:
    ignore = privileged = False
    while value[:1] in ("+", "-", "@", ":", "!"):
        ignore |= value[0] == "-"
        privileged |= value[0] in ("+", "!")
        value = value[1:]
    words = split_words(value, where)
    if not words or not words[0].startswith("/"):
        raise UnitError(f"{where}: the executable must be an absolute path (got {value[:60]!r})")
    return Command(tuple(words), ignore, privileged)


def _set(svc: ServiceExec, key: str, value: str) -> None:
    """One ``[Service]`` setting (the ones that decide what runs and with what)."""
    where = f"{key}="
    if key == "Environment":
        for word in split_words(value, where):
            name, eq, val = word.partition("=")
            if not eq:
                raise UnitError(f"Environment={word!r}: not NAME=value")
            svc.environment[name] = val
    elif key == "EnvironmentFile":
        svc.environment_files.append((value.lstrip("-"), value.startswith("-")))
    elif key == "UnsetEnvironment":
        svc.unset.extend(split_words(value, where))
    elif key == "ExecStartPre":
        svc.exec_start_pre.append(_command(value, where))
    elif key == "ExecStart":
        if svc.exec_start is not None:
            raise UnitError("ExecStart=: more than one (Type=simple takes one)")
        svc.exec_start = _command(value, where)
    elif key.startswith("RuntimeDirectory"):
        _set_runtime_directory(svc, key, value)
    elif key == "User":
        svc.user = value
    elif key == "WorkingDirectory":
        svc.working_directory = value


def _set_runtime_directory(svc: ServiceExec, key: str, value: str) -> None:
    """``RuntimeDirectory=`` (names relative to /run) and ``RuntimeDirectoryMode=``."""
    if key == "RuntimeDirectory":
        for name in split_words(value, f"{key}="):
            if name.startswith("/") or ".." in name.split("/"):
                raise UnitError(f"RuntimeDirectory={name!r}: a relative path under /run")
            svc.runtime_directories.append(name)
    elif key == "RuntimeDirectoryMode":
        try:
            svc.runtime_directory_mode = int(value, 8)
        except ValueError:
            raise UnitError(f"RuntimeDirectoryMode={value!r}: an octal mode") from None


def parse_unit(text: str) -> ServiceExec:
    """The ``[Service]`` section's execution settings (UnitError names the setting)."""
    svc = ServiceExec()
    section = ""
    for raw in text.split("\n"):
        line = raw.strip(" \t\r")
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section != "Service":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise UnitError(f"[Service] line {line[:60]!r}: not key=value")
        _set(svc, key.strip(" \t"), value.strip(" \t"))
    return svc


def read_environment_file(text: str, where: str = "EnvironmentFile") -> dict[str, str]:
    """``KEY=VALUE`` lines as systemd reads an EnvironmentFile (quotes, ``\\`` escapes)."""
    env: dict[str, str] = {}
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip(" \t\r")
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        key = key.strip(" \t")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise UnitError(f"{where} line {number}: not KEY=VALUE")
        value = value.strip(" \t")
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        elif len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        env[key] = value
    return env


def read_files(svc: ServiceExec, root: Path = Path("/")) -> dict[str, str | None]:
    """The EnvironmentFile= texts under ``root`` (None where missing)."""
    out: dict[str, str | None] = {}
    for path, _ in svc.environment_files:
        target = root / path.lstrip("/")
        out[path] = target.read_text() if target.is_file() else None
    return out
