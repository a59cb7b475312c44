"""An engine's source tree as an operator builds it: a base commit and pull requests on top.

The seeds' DFlash build was vLLM 0.20.1 with PR #40727 *and* PR #40898; one git ref
cannot say that. ``inference_engine_git_ref`` is the base (a tag, a branch, a PR) and
``inference_engine_git_patches`` the ordered refs (or pinned commits) applied on top,
each merged (``git merge --no-ff``, the default) or cherry-picked (one commit each).
:func:`prepare` makes that tree in ``dest`` and records what it holds
(``.specops-source.json``: repository, base, each patch's ref and commit, the method and
the resulting HEAD); the engine is then installed from the directory. A patch that does
not apply fails naming it, its commit and the conflicting files; nothing is left half
made (the tree is built in ``<dest>.partial`` and renamed into place). A tree that
already holds the same inputs is left as it is.

Stdlib only (it runs on the managed host; tests drive it with local repositories).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MARKER",
    "METHODS",
    "EngineSourceError",
    "Patch",
    "parse_patches",
    "prepare",
]

MARKER = ".specops-source.json"
METHODS = ("merge", "cherry-pick")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "specops", "GIT_AUTHOR_EMAIL": "specops@localhost",
    "GIT_COMMITTER_NAME": "specops", "GIT_COMMITTER_EMAIL": "specops@localhost",
    "GIT_TERMINAL_PROMPT": "0",
}  # fmt: skip


class EngineSourceError(ValueError):
    """A source tree that cannot be made: ``<variable>: what went wrong``."""


@dataclass(frozen=True)
class Patch:
    """One pull request or commit applied on the base: its ref and the commit it is."""

    ref: str
    commit: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"ref": self.ref, "commit": self.commit}


def parse_patches(value: Any, name: str = "inference_engine_git_patches") -> list[Patch]:
    """The inventory's list: each a ref (``refs/pull/40898/head``), a 40-hex commit, or
    ``{ref, commit}`` (a ref with its pinned commit). Unresolved refs keep ``commit`` ''."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise EngineSourceError(
            f"{name}: must be a list of refs or {{ref, commit}} (got {value!r})"
        )
    out: list[Patch] = []
    for index, item in enumerate(value):
        where = f"{name}[{index}]"
        if isinstance(item, str) and item.strip():
            text = item.strip()
            out.append(Patch(text, text if _COMMIT.match(text) else ""))
        elif isinstance(item, Mapping) and str(item.get("ref") or "").strip():
            commit = str(item.get("commit") or "").strip()
            if commit and not _COMMIT.match(commit):
                raise EngineSourceError(
                    f"{where}.commit: must be a full 40-hex commit (got {commit!r})"
                )
            out.append(Patch(str(item["ref"]).strip(), commit))
        else:
            raise EngineSourceError(
                f"{where}: a ref such as refs/pull/40898/head, a 40-hex commit, or"
                f" {{ref, commit}} (got {item!r})"
            )
    return out


def _git(cwd: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False,
        env={**os.environ, **_GIT_ENV},
    )  # fmt: skip
    if check and proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).split())[-400:]
        raise EngineSourceError(f"git {' '.join(args[:2])}: exit {proc.returncode}: {tail}")
    return proc


def _record(repo: str, base: Patch, patches: Sequence[Patch], method: str) -> dict[str, Any]:
    return {
        "repo": repo,
        "base": base.as_dict(),
        "patches": [p.as_dict() for p in patches],
        "method": method,
    }


def _current(dest: str, wanted: Mapping[str, Any]) -> dict[str, Any] | None:
    """The marker of ``dest`` when it holds ``wanted`` and its tree is clean at that HEAD."""
    try:
        with open(os.path.join(dest, MARKER), encoding="utf-8") as fh:
            have = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(have, dict) or {k: have.get(k) for k in wanted} != dict(wanted):
        return None
    head = _git(dest, "rev-parse", "HEAD", check=False).stdout.strip()
    dirty = _git(dest, "status", "--porcelain", "--untracked-files=no", check=False).stdout
    return have if head == have.get("head") and not dirty.strip() else None


def _fetch(tree: str, patch: Patch, where: str) -> None:
    """Fetch ``patch``'s ref and make sure its pinned commit is there."""
    fetched = _git(tree, "fetch", "--quiet", "origin", patch.ref, check=False)
    if fetched.returncode != 0 and _COMMIT.match(patch.ref):
        return  # a bare commit: fetched by its id below
    if fetched.returncode != 0:
        tail = " ".join(fetched.stderr.split())[-300:]
        raise EngineSourceError(f"{where}: cannot fetch {patch.ref} ({tail})")
    if not patch.commit:
        raise EngineSourceError(f"{where}: {patch.ref} was not resolved to a commit")
    if _git(tree, "cat-file", "-e", f"{patch.commit}^{{commit}}", check=False).returncode != 0:
        _git(tree, "fetch", "--quiet", "origin", patch.commit, check=False)
        if _git(tree, "cat-file", "-e", f"{patch.commit}^{{commit}}", check=False).returncode:
            raise EngineSourceError(
                f"{where}: {patch.ref} no longer holds the pinned commit {patch.commit}"
            )


def _apply(tree: str, patch: Patch, method: str, where: str, onto: str) -> None:
    if method == "merge":
        message = f"specops: merge {patch.ref} ({patch.commit[:12]})"
        args = ["merge", "--no-ff", "--no-edit", "-m", message, patch.commit]
    else:
        args = ["cherry-pick", "-x", patch.commit]
    done = _git(tree, *args, check=False)
    if done.returncode == 0:
        return
    files = _git(tree, "diff", "--name-only", "--diff-filter=U", check=False).stdout.split()
    _git(tree, method, "--abort", check=False)
    why = f"conflict in {', '.join(files)}" if files else " ".join(done.stderr.split())[-300:]
    raise EngineSourceError(
        f"{where}: {patch.ref} ({patch.commit[:12]}) does not {method} onto {onto}: {why};"
        " pin commits that apply in this order, or rebase the pull request onto the base"
    )


def prepare(
    repo: str,
    base: Patch,
    patches: Sequence[Patch],
    dest: str,
    *,
    method: str = "merge",
    check_mode: bool = False,
) -> dict[str, Any]:
    """Make ``dest`` the base with ``patches`` applied in order; ``{changed, head, ...}``.

    ``base`` and every patch carry their resolved commits. In check mode nothing is
    fetched or written (``changed`` says whether a run would build the tree)."""
    if method not in METHODS:
        raise EngineSourceError(
            f"inference_engine_git_patch_method: one of {', '.join(METHODS)} (got {method!r})"
        )
    if not _COMMIT.match(base.commit):
        raise EngineSourceError(f"inference_engine_git_commit: the base {base.ref} is not resolved")
    wanted = _record(repo, base, patches, method)
    have = _current(dest, wanted)
    if have is not None:
        return {"changed": False, "head": have["head"], **wanted}
    if check_mode:
        return {"changed": True, "head": "", **wanted}
    partial = dest.rstrip("/") + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    _git(partial, "init", "--quiet")
    _git(partial, "remote", "add", "origin", repo)
    _fetch(partial, base, "inference_engine_git_ref")
    _git(partial, "checkout", "--quiet", "--detach", base.commit)
    applied = [f"{base.ref} ({base.commit[:12]})"]
    for index, patch in enumerate(patches):
        where = f"inference_engine_git_patches[{index}]"
        _fetch(partial, patch, where)
        _apply(partial, patch, method, where, " + ".join(applied))
        applied.append(f"{patch.ref} ({patch.commit[:12]})")
    head = _git(partial, "rev-parse", "HEAD").stdout.strip()
    with open(os.path.join(partial, MARKER), "w", encoding="utf-8") as fh:
        json.dump({**wanted, "head": head}, fh, indent=1, sort_keys=True)
        fh.write("\n")
    old = dest.rstrip("/") + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(dest):
        os.rename(dest, old)
    os.rename(partial, dest)
    shutil.rmtree(old, ignore_errors=True)
    return {"changed": True, "head": head, **wanted}
