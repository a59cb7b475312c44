"""Filters that expose the speculative profile translator (``module_utils/speculative_*``).

    {{ profile | specops.infra.speculative_launch('sglang', '0.5.11') }}
    {{ profile | specops.infra.speculative_launch('sglang', '0.5.11', ['ddtree'],
                 name='inference_service_speculative', flags=flag_set,
                 target={'path': model_dir, 'architectures': ['MiMoForCausalLM']}) }}
    {{ profile | specops.infra.speculative_validate }}
    {{ profile | specops.infra.service_launch(engine, version, caps, flags=flag_set,
                 venv=..., model=..., served_model_name=..., host=..., port=...,
                 engine_args=[...], base_env={...}) }}

``speculative_launch`` is the one route from a profile to a server: it parses and
validates the profile once and returns ``{argv, env, profile}`` (the engine's speculative
flags, the environment the method needs, the normalised profile mapping), or fails the
task with ``<name>.<field>: problem`` naming the valid values. ``flags=``: the installed
build's flag set (``<venv>/.specops-engine-flags.json``, written by the
``specops.infra.engine_flags`` module after the build); with it the profile is checked
against what that build accepts and its capabilities are read from it; without it, the
recorded list of the released version. ``target=``: the served model (``path`` as the
unit passes it, ``architectures`` from its config.json), for what an engine needs per
architecture (SGLang's NEXTN draft path: ``speculative.translate.TargetModel``).

``service_launch`` is what ``inference_service`` calls: the same one parse and
translation, the other engine arguments checked against the same flag set, and the whole
command line and environment of the unit (``module_utils/service_launch.py``), handed to
its template as they are.

``speculative_validate`` checks a profile without an engine (the rollout's new profile
before it knows the node's build); it runs the same parse.

The logic is the collection's module_utils (``speculative.profile``,
``speculative.engines``, ``speculative.translate.launch``); this file only adapts errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.module_utils.errors import (
    SpecopsError,
    ValidationError,
)
from ansible_collections.specops.infra.plugins.module_utils.service_launch import (
    service_launch as _service_launch,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import Engine
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import (
    TargetModel,
    launch,
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


def speculative_launch(
    data: Mapping[str, Any] | None,
    engine: str,
    version: str,
    capabilities: Sequence[str] | None = None,
    *,
    name: str = "speculative",
    flags: Mapping[str, Any] | None = None,
    target: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``{argv, env, profile}`` for a profile mapping on an engine build, in one pass."""
    profile = _profile(data, name)
    model = TargetModel.from_mapping(target) if target else None
    argv, env = _named(
        name, lambda: launch(profile, _engine(engine, version, capabilities, flags), target=model)
    )
    return {"argv": list(argv), "env": dict(env), "profile": profile.to_mapping()}


def service_launch(
    data: Mapping[str, Any] | None,
    engine: str,
    version: str,
    capabilities: Sequence[str] | None = None,
    *,
    flags: Mapping[str, Any] | None = None,
    venv: str,
    model: str,
    served_model_name: str,
    host: str,
    port: Any,
    engine_args: Sequence[Any] = (),
    key_config: Sequence[str] = (),
    base_env: Mapping[str, Any] | None = None,
    cache_dir: str = "",
    cuda_visible_devices: str = "",
    environment: Mapping[str, Any] | None = None,
    architectures: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The unit's ``{argv, env, profile, label}`` from one parse of the profile
    (``module_utils/service_launch.py``); ``architectures``: the model's config.json's."""
    return _service_launch(
        data, _engine(engine, version, capabilities, flags), venv=str(venv), model=str(model),
        served_model_name=str(served_model_name), host=str(host), port=port,
        engine_args=engine_args, key_config=[str(k) for k in key_config or ()],
        base_env=base_env, cache_dir=str(cache_dir),
        cuda_visible_devices=str(cuda_visible_devices or ""), environment=environment,
        architectures=[str(a) for a in architectures or ()],
    )  # fmt: skip


def speculative_validate(
    data: Mapping[str, Any] | None, *, name: str = "speculative"
) -> dict[str, Any]:
    """The normalised profile mapping (no engine: what every engine checks first)."""
    return _profile(data, name).to_mapping()


class FilterModule:
    """specops.infra speculative filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "service_launch": _wrap(service_launch),
            "speculative_launch": _wrap(speculative_launch),
            "speculative_validate": _wrap(speculative_validate),
        }
