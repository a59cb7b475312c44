"""The engine descriptor and the inference_engine role's build plan (requirements, build
key, venv path) as filters.

    {{ inference_engine_engine | specops.infra.engine_descriptor }}
    {{ inference_service_engine | specops.infra.engine_descriptor(venv=..., cache_dir=...,
         name='inference_service_engine') }}

    {{ inference_engine_engine | specops.infra.engine_build_plan(version=..., git_ref=...,
         git_commit=..., python=..., app_dir=...) }}

    {{ inference_engine_engine | specops.infra.engine_pin(version=..., model=..., pins=...) }}

The logic is ``plugins/module_utils/engine/descriptor.py`` (the descriptor) and
``plugins/module_utils/engine/build.py`` (stdlib, also used on the host: the build plan
and the model pin, one rule with the controller preflight); this file only turns their
ValueError (``<variable>: problem``) into a filter error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.module_utils.engine.build import model_pin, plan
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import descriptor
from ansible_collections.specops.infra.plugins.module_utils.engine.source import (
    EngineSourceError,
    parse_patches,
)

__all__ = [
    "FilterModule",
    "engine_build_plan",
    "engine_descriptor",
    "engine_patches",
    "engine_pin",
]


def engine_build_plan(
    engine: str,
    *,
    version: str,
    python: str,
    app_dir: str,
    git_ref: str = "",
    git_commit: str = "",
    git_repo: str = "",
    extra_packages: Sequence[str] = (),
    removed: Sequence[str] = (),
    recipe: int = 1,
    git_patches: Sequence[Mapping[str, str]] = (),
    patch_method: str = "merge",
) -> dict[str, Any]:
    """The build as a mapping: key, digest, venv, requirements, removed, build_env, source,
    git_patches, patch_method, source_dir."""
    try:
        built = plan(
            engine=str(engine), version=str(version).strip(), git_ref=str(git_ref).strip(),
            git_commit=str(git_commit).strip(), git_repo=str(git_repo).strip(),
            python=str(python).strip(), extra_packages=[str(p) for p in extra_packages],
            removed=[str(p) for p in removed], recipe=int(recipe), app_dir=str(app_dir),
            git_patches=list(git_patches or ()), patch_method=str(patch_method),
        )  # fmt: skip
    except ValueError as exc:
        raise AnsibleFilterError(f"engine_build_plan: {exc}") from exc
    return built.as_dict()


def engine_descriptor(
    engine: str,
    *,
    venv: str = "",
    cache_dir: str = "",
    name: str = "inference_engine_engine",
) -> dict[str, Any]:
    """The engine's descriptor (``module_utils/engine/descriptor.py``) as a mapping; its
    ``environment`` has ``venv`` and ``cache_dir`` filled in."""
    try:
        return descriptor(str(engine), str(name)).as_dict(venv=str(venv), cache_dir=str(cache_dir))
    except ValueError as exc:
        raise AnsibleFilterError(f"engine_descriptor: {exc}") from exc


def engine_pin(
    engine: str,
    *,
    version: str = "",
    model: str = "",
    pins: Mapping[str, Any] | None = None,
    git_ref: str = "",
) -> dict[str, str]:
    """The version the build takes and the pin's verdict (``problem``: '' or why not)."""
    try:
        found = model_pin(
            str(engine), str(version or ""), str(model or ""), pins or {},
            git_ref=str(git_ref or ""),
        )  # fmt: skip
    except ValueError as exc:
        raise AnsibleFilterError(f"engine_pin: {exc}") from exc
    return found.as_dict()


def engine_patches(value: Any, resolved: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, str]]:
    """``inference_engine_git_patches`` as ``[{ref, commit}]``: a commit pinned or given,
    else the one ``git ls-remote`` printed for its ref (``resolved``: that loop's results),
    else ''."""
    try:
        patches = parse_patches(value)
    except EngineSourceError as exc:
        raise AnsibleFilterError(f"engine_patches: {exc}") from exc
    found: dict[str, str] = {}
    for result in resolved or ():
        item = result.get("item") if isinstance(result, Mapping) else None
        words = str(result.get("stdout", "") if isinstance(result, Mapping) else "").split()
        if isinstance(item, Mapping) and words:
            found[str(item.get("ref", ""))] = words[0]
    return [{"ref": p.ref, "commit": p.commit or found.get(p.ref, "")} for p in patches]


class FilterModule:
    """specops.infra engine build filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "engine_build_plan": engine_build_plan,
            "engine_descriptor": engine_descriptor,
            "engine_patches": engine_patches,
            "engine_pin": engine_pin,
        }
