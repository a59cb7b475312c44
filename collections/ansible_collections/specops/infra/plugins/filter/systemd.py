"""Filters that write systemd unit syntax correctly.

    ExecStart={{ argv | specops.infra.systemd_command }}
    Environment={{ 'KEY=' ~ value | specops.infra.systemd_quote }}

systemd splits ``ExecStart=`` itself (not a shell): words may be double-quoted with C
escapes inside, ``%`` starts a specifier and ``$`` a variable, so a JSON argument
such as vLLM's ``--speculative-config {"method":"ngram",...}`` must be quoted and its
``%`` and ``$`` doubled. Shell quoting (the ``quote`` filter) is wrong here: systemd
does not understand ``'\\''``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

__all__ = ["FilterModule", "systemd_command", "systemd_quote"]

_SAFE = re.compile(r"[A-Za-z0-9_@%$+=:,./-]+")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def systemd_quote(word: Any) -> str:
    """One word for a unit file's command line or ``Environment=`` assignment."""
    text = str(word)
    text = text.replace("%", "%%").replace("$", "$$")
    if text and _SAFE.fullmatch(text):
        return text
    if any(ord(c) < 32 and c not in _ESCAPES for c in text):
        raise AnsibleFilterError(f"systemd_quote: control character in {word!r}")
    return '"' + "".join(_ESCAPES.get(c, c) for c in text) + '"'


def systemd_command(argv: Sequence[Any]) -> str:
    """A command line for ``ExecStart=``: the first word an absolute path."""
    if isinstance(argv, str) or not argv:
        raise AnsibleFilterError(f"systemd_command: needs a non-empty list of words (got {argv!r})")
    if not str(argv[0]).startswith("/"):
        raise AnsibleFilterError(
            f"systemd_command: the executable must be an absolute path (got {argv[0]!r})"
        )
    return " ".join(systemd_quote(w) for w in argv)


class FilterModule:
    """specops.infra systemd filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"systemd_quote": systemd_quote, "systemd_command": systemd_command}
