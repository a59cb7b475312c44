"""Filters that write systemd unit syntax correctly.

    ExecStart={{ argv | specops.infra.systemd_command }}
    Environment={{ ('KEY=' ~ value) | specops.infra.systemd_quote(where='environment') }}

systemd splits ``ExecStart=`` itself (not a shell): words may be double-quoted with C
escapes inside, ``%`` starts a specifier and ``$`` a variable, so a JSON argument
such as vLLM's ``--speculative-config {"method":"ngram",...}`` must be quoted and its
``%`` and ``$`` doubled. ``Environment=`` assignments are quoted the same way and
expand ``%`` specifiers, but ``$`` means nothing there (systemd.exec(5): variables are
expanded in command lines only): a doubled ``$`` would reach the server as ``$$``.
Shell quoting (the ``quote`` filter) is wrong here: systemd does not understand
``'\\''``. ``secret_env_keys`` names the environment keys that must not go into a unit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.module_utils.service_unit import SECRET_KEY

__all__ = ["FilterModule", "secret_env_keys", "systemd_command", "systemd_quote"]

_SAFE = re.compile(r"[A-Za-z0-9_@%$+=:,./-]+")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def systemd_quote(word: Any, where: str = "command") -> str:
    """One word for a unit file's command line (``where='command'``: ``%`` and ``$``
    doubled) or ``Environment=`` assignment (``where='environment'``: ``%`` doubled,
    ``$`` kept, as systemd gives it no meaning there)."""
    if where not in ("command", "environment"):
        raise AnsibleFilterError(
            f"systemd_quote: where must be 'command' or 'environment' (got {where!r})"
        )
    text = str(word).replace("%", "%%")
    if where == "command":
        text = text.replace("$", "$$")
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


def secret_env_keys(environment: Any) -> list[str]:
    """Keys of an environment mapping that look like secrets (service_unit's rule)."""
    if not isinstance(environment, dict):
        raise AnsibleFilterError(f"secret_env_keys: needs a mapping (got {environment!r})")
    return sorted(str(k) for k in environment if SECRET_KEY.search(str(k)))


class FilterModule:
    """specops.infra systemd filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "systemd_quote": systemd_quote,
            "systemd_command": systemd_command,
            "secret_env_keys": secret_env_keys,
        }
