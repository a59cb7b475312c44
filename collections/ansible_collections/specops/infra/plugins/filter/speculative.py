"""Filters that expose the speculative profile translator (``module_utils/speculative_*``).

    {{ profile | specops.infra.speculative_argv('sglang', '0.5.11') }}
    {{ profile | specops.infra.speculative_argv('sglang', '0.5.11', ['ddtree']) }}
    {{ profile | specops.infra.speculative_env('sglang', '0.5.11', ['ddtree']) }}
    {{ profile | specops.infra.speculative_validate }}
    {{ profile | specops.infra.speculative_validate('vllm', '0.32.0') }}

Each takes ``flags=``: the installed build's flag set (``<venv>/.specops-engine-flags.json``,
written by the ``specops.infra.engine_flags`` module after the build); with it the
profile is checked against what that build accepts and its capabilities are read from
it; without it, the recorded list of the released version.

``speculative_argv`` returns the engine flags as a list (quote it for ExecStart with
``map('quote') | join(' ')``); ``speculative_validate`` returns the normalised profile
mapping or fails the task with ``field: problem``. The logic is the collection's
module_utils (``speculative_profile``, ``speculative_engines``,
``speculative_translate``); this file only adapts errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.module_utils.errors import (
    SpecopsError,
    ValidationError,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative_engines import Engine
from ansible_collections.specops.infra.plugins.module_utils.speculative_profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative_translate import (
    to_argv,
    to_env,
)

__all__ = ["FilterModule"]


def _profile(data: Mapping[str, Any] | None, name: str) -> SpeculativeProfile:
    return SpeculativeProfile.from_mapping(data, prefix=name)


def _named(name: str, render: Callable[[], Any]) -> Any:
    """Run ``render``; report translator errors under the inventory variable's name."""
    try:
        return render()
    except ValidationError as exc:
        if name == "speculative" or not exc.field.startswith("speculative"):
            raise
        raise ValidationError(name + exc.field.removeprefix("speculative"), exc.problem) from None


def _engine(
    engine: str,
    version: str,
    capabilities: Sequence[str] | None,
    flags: Mapping[str, Any] | None = None,
) -> Engine:
    return Engine.parse(
        str(engine), str(version), [str(c) for c in capabilities or ()], flags or None
    )


def _wrap(func: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SpecopsError as exc:
            raise AnsibleFilterError(f"{func.__name__}: {exc}") from exc

    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


def speculative_argv(
    data: Mapping[str, Any] | None,
    engine: str,
    version: str,
    capabilities: Sequence[str] | None = None,
    *,
    name: str = "speculative",
    flags: Mapping[str, Any] | None = None,
) -> list[str]:
    """The engine's speculative flags for a profile mapping."""
    profile = _profile(data, name)
    return list(
        _named(name, lambda: to_argv(profile, _engine(engine, version, capabilities, flags)))
    )


def speculative_env(
    data: Mapping[str, Any] | None,
    engine: str,
    version: str,
    capabilities: Sequence[str] | None = None,
    *,
    name: str = "speculative",
    flags: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Environment variables the profile needs on that engine (DDTree's top-k)."""
    profile = _profile(data, name)
    return dict(
        _named(name, lambda: to_env(profile, _engine(engine, version, capabilities, flags)))
    )


def speculative_validate(
    data: Mapping[str, Any] | None,
    engine: str | None = None,
    version: str | None = None,
    capabilities: Sequence[str] | None = None,
    *,
    name: str = "speculative",
    flags: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The normalised profile; with an engine, also proves that engine can render it."""
    profile = _profile(data, name)
    if engine is not None:
        if version is None:
            raise AnsibleFilterError("speculative_validate: engine given without version")
        _named(name, lambda: to_argv(profile, _engine(engine, version, capabilities, flags)))
    return profile.to_mapping()


class FilterModule:
    """specops.infra speculative filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "speculative_argv": _wrap(speculative_argv),
            "speculative_env": _wrap(speculative_env),
            "speculative_validate": _wrap(speculative_validate),
        }
