"""DFlash drafter preflight for controller-side callers (CLI, sweep, filters).

The check itself lives in the collection's stdlib-only module_utils
(``ansible_collections.specops.infra.plugins.module_utils.dflash_drafter``) because the
``specops.infra.drafter_preflight`` module runs it on managed hosts; this module
imports it from there, so there is one home (the collection installed where Ansible
finds it: :mod:`specops.collection`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils import dflash_drafter as _core
from ansible_collections.specops.infra.plugins.module_utils import drafter_check as _check

from specops.errors import ValidationError

DrafterFinding = _core.DrafterFinding
check_drafter_config = _core.check_drafter_config
check_drafter_dirs = _core.check_drafter_dirs
default_target_layer_ids = _core.default_target_layer_ids
format_findings = _core.format_findings
DRAFTER_METHODS = _check.DRAFTER_METHODS
HUB_ID = _check.HUB_ID
KNOWN_DRAFTERS = _check.KNOWN_DRAFTERS
check = _check.check
default_hub_cache = _check.default_hub_cache
fetch_hint = _check.fetch_hint
resolve = _check.resolve

__all__ = [
    "DRAFTER_METHODS",
    "HUB_ID",
    "KNOWN_DRAFTERS",
    "DrafterFinding",
    "check",
    "check_drafter_config",
    "check_drafter_dirs",
    "default_hub_cache",
    "default_target_layer_ids",
    "fetch_hint",
    "format_findings",
    "raise_for_findings",
    "resolve",
    "validate_drafter",
]


def raise_for_findings(findings: list[DrafterFinding]) -> None:
    """Turn findings into one ValidationError naming the first field and listing all."""
    if not findings:
        return
    first = findings[0]
    rest = f" (and {len(findings) - 1} more: {format_findings(findings[1:])})" * (len(findings) > 1)
    raise ValidationError(first.field, f"found {first.message.split(': found ', 1)[1]}{rest}")


def validate_drafter(
    target: Mapping[str, Any] | str | Path,
    drafter: Mapping[str, Any] | str | Path,
    *,
    window: int | None = None,
    num_draft_tokens: int | None = None,
) -> None:
    """Raise ValidationError unless the drafter fits the target.

    ``target``/``drafter`` are parsed config.json mappings or model directories.
    """
    if isinstance(target, (str, Path)) and isinstance(drafter, (str, Path)):
        findings = check_drafter_dirs(
            str(target), str(drafter), window=window, num_draft_tokens=num_draft_tokens
        )
    elif isinstance(target, Mapping) and isinstance(drafter, Mapping):
        findings = check_drafter_config(
            target, drafter, window=window, num_draft_tokens=num_draft_tokens
        )
    else:
        raise TypeError("target and drafter must both be mappings or both be directories")
    raise_for_findings(findings)
