"""The inference_engine role's build table and build plan (requirements, build key, venv
path) as filters.

    {{ inference_engine_engine | specops.infra.engine_build_facts }}

    {{ inference_engine_engine | specops.infra.engine_build_plan(version=..., git_ref=...,
         git_commit=..., python=..., app_dir=...) }}

The logic is ``plugins/module_utils/engine_build.py`` (stdlib, also used on the host);
this file only turns its ValueError (``inference_engine_<input>: problem``) into a
filter error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.module_utils.engine_build import engine_facts, plan

__all__ = ["FilterModule", "engine_build_facts", "engine_build_plan"]


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
) -> dict[str, Any]:
    """The build as a mapping: key, digest, venv, requirements, removed, build_env, source."""
    try:
        built = plan(
            engine=str(engine), version=str(version).strip(), git_ref=str(git_ref).strip(),
            git_commit=str(git_commit).strip(), git_repo=str(git_repo).strip(),
            python=str(python).strip(), extra_packages=[str(p) for p in extra_packages],
            removed=[str(p) for p in removed], recipe=int(recipe), app_dir=str(app_dir),
        )  # fmt: skip
    except ValueError as exc:
        raise AnsibleFilterError(f"engine_build_plan: {exc}") from exc
    return built.as_dict()


def engine_build_facts(engine: str) -> dict[str, Any]:
    """The engine's row of the build table: package, git_repo,
    system_packages, removed, recorded."""
    try:
        return engine_facts(str(engine)).as_dict()
    except ValueError as exc:
        raise AnsibleFilterError(f"engine_build_facts: {exc}") from exc


class FilterModule:
    """specops.infra engine build filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"engine_build_facts": engine_build_facts, "engine_build_plan": engine_build_plan}
