"""Builds as operators make them: a base ref and pull requests applied in order (issue 49).

``module_utils/engine/source.py`` (the ``specops.infra.engine_source`` module) on a local
repository standing in for vLLM's: a base commit tagged ``v0.20.1``, two pull requests at
``refs/pull/N/head`` that touch different files (the seeds' #40727 and #40898), and one
that conflicts with the first. The tree holds both in order, records them, is left as
it is on a re-run; a conflict names the patch, its commit and the file, and leaves no
tree behind. The build plan installs that tree and keys the venv on every commit.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.engine import build as engine_build
from ansible_collections.specops.infra.plugins.module_utils.engine.source import (
    MARKER,
    EngineSourceError,
    Patch,
    parse_patches,
    prepare,
)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}  # fmt: skip
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def upstream(tmp_path: Path) -> dict[str, str]:
    """A repository with a base and three pull requests; each name -> its commit."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    _git(repo, "init", "--quiet", "--initial-branch=main")
    (repo / "drafter.py").write_text("LAYER_OFFSET = 0\n")
    (repo / "config.py").write_text("LAYERS = 'full'\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "--quiet", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    _git(repo, "tag", "v0.20.1")
    commits = {"base": base, "repo": str(repo)}
    for number, path, text in (("40727", "drafter.py", "LAYER_OFFSET = 1\n"),
                               ("40898", "config.py", "LAYERS = 'from layer_types'\n"),
                               ("99999", "drafter.py", "LAYER_OFFSET = 2\n")):  # fmt: skip
        _git(repo, "checkout", "--quiet", "--detach", base)
        (repo / path).write_text(text)
        _git(repo, "commit", "--quiet", "-am", f"PR {number}")
        commits[number] = _git(repo, "rev-parse", "HEAD")
        _git(repo, "update-ref", f"refs/pull/{number}/head", commits[number])
    _git(repo, "checkout", "--quiet", "main")
    return commits


def _patches(up: dict[str, str], *numbers: str) -> list[Patch]:
    return [Patch(f"refs/pull/{n}/head", up[n]) for n in numbers]


def test_the_base_with_two_pull_requests_in_order(upstream: dict[str, str], tmp_path: Path) -> None:
    dest = tmp_path / "src"
    base = Patch("refs/tags/v0.20.1", upstream["base"])
    done = prepare(upstream["repo"], base, _patches(upstream, "40727", "40898"), str(dest))
    assert done["changed"] is True
    assert (dest / "drafter.py").read_text() == "LAYER_OFFSET = 1\n"
    assert (dest / "config.py").read_text() == "LAYERS = 'from layer_types'\n"
    log = _git(dest, "log", "--format=%s", "-3").splitlines()
    assert log[:2] == [
        f"specops: merge refs/pull/40898/head ({upstream['40898'][:12]})",
        f"specops: merge refs/pull/40727/head ({upstream['40727'][:12]})",
    ]
    record = json.loads((dest / MARKER).read_text())
    assert record["head"] == done["head"] == _git(dest, "rev-parse", "HEAD")
    assert [p["ref"] for p in record["patches"]] == ["refs/pull/40727/head", "refs/pull/40898/head"]
    again = prepare(upstream["repo"], base, _patches(upstream, "40727", "40898"), str(dest))
    assert again["changed"] is False
    assert again["head"] == done["head"]
    # another order is another tree
    other = prepare(upstream["repo"], base, _patches(upstream, "40898", "40727"), str(dest))
    assert other["changed"] is True
    assert other["head"] != done["head"]


def test_cherry_pick_applies_one_commit_each(upstream: dict[str, str], tmp_path: Path) -> None:
    dest = tmp_path / "src"
    done = prepare(
        upstream["repo"], Patch("refs/tags/v0.20.1", upstream["base"]),
        _patches(upstream, "40727", "40898"), str(dest), method="cherry-pick",
    )  # fmt: skip
    assert done["changed"] is True
    assert _git(dest, "rev-list", "--count", "HEAD") == "3"  # base and two picks, no merges
    assert (dest / "config.py").read_text() == "LAYERS = 'from layer_types'\n"


def test_a_conflict_names_the_patch_and_the_file_and_leaves_no_tree(
    upstream: dict[str, str], tmp_path: Path
) -> None:
    dest = tmp_path / "src"
    with pytest.raises(EngineSourceError) as caught:
        prepare(
            upstream["repo"], Patch("refs/tags/v0.20.1", upstream["base"]),
            _patches(upstream, "40727", "99999"), str(dest),
        )  # fmt: skip
    message = str(caught.value)
    assert message.startswith(
        f"inference_engine_git_patches[1]: refs/pull/99999/head ({upstream['99999'][:12]})"
        f" does not merge onto refs/tags/v0.20.1 ({upstream['base'][:12]}) +"
        f" refs/pull/40727/head ({upstream['40727'][:12]}): conflict in drafter.py"
    ), message
    assert not dest.exists()


def test_a_check_run_fetches_and_writes_nothing(upstream: dict[str, str], tmp_path: Path) -> None:
    dest = tmp_path / "src"
    done = prepare(
        upstream["repo"], Patch("refs/tags/v0.20.1", upstream["base"]),
        _patches(upstream, "40727"), str(dest), check_mode=True,
    )  # fmt: skip
    assert done["changed"] is True
    assert list(tmp_path.iterdir()) == [tmp_path / "upstream"]


def test_a_moved_ref_that_lost_the_pinned_commit_is_named(
    upstream: dict[str, str], tmp_path: Path
) -> None:
    gone = Patch("refs/pull/40727/head", "f" * 40)
    with pytest.raises(EngineSourceError) as caught:
        prepare(upstream["repo"], Patch("v0.20.1", upstream["base"]), [gone], str(tmp_path / "s"))
    assert str(caught.value) == (
        "inference_engine_git_patches[0]: refs/pull/40727/head no longer holds the pinned"
        f" commit {'f' * 40}"
    )


def test_the_inventory_forms_of_a_patch() -> None:
    commit = "a" * 40
    given = ["refs/pull/1/head", commit, {"ref": "refs/pull/2/head", "commit": commit}]
    assert parse_patches(given) == [
        Patch("refs/pull/1/head"), Patch(commit, commit), Patch("refs/pull/2/head", commit)
    ]  # fmt: skip
    with pytest.raises(EngineSourceError, match=r"inference_engine_git_patches\[0\]\.commit"):
        parse_patches([{"ref": "refs/pull/2/head", "commit": "abc"}])
    with pytest.raises(EngineSourceError, match="must be a list"):
        parse_patches("refs/pull/1/head")


def test_the_build_plan_installs_the_tree_and_keys_every_commit() -> None:
    base = "b" * 40
    one = [{"ref": "refs/pull/40727/head", "commit": "1" * 40}]
    two = [*one, {"ref": "refs/pull/40898/head", "commit": "2" * 40}]
    common = {"engine": "vllm", "version": "0.20.1", "git_ref": "refs/tags/v0.20.1",
              "git_commit": base, "python": "/usr/bin/python3 3.11.2",
              "app_dir": "/opt/s"}  # fmt: skip
    plain = engine_build.plan(**common)
    first = engine_build.plan(**common, git_patches=one)
    both = engine_build.plan(**common, git_patches=two)
    assert plain.requirements[0] == f"vllm @ git+https://github.com/vllm-project/vllm.git@{base}"
    assert both.requirements[0] == f"vllm @ file://{both.source_dir}"
    assert both.source_dir.startswith(f"/opt/s/src/vllm-{base[:12]}-")
    assert both.venv.startswith(f"/opt/s/vllm-git-{base[:12]}+2-")
    assert len({plain.venv, first.venv, both.venv}) == 3
    assert both.key["git_patches"] == [f"{p['ref']}@{p['commit']}" for p in two]
    assert both.build_env == {"VLLM_USE_PRECOMPILED": "1"}
    sglang = engine_build.plan(**{**common, "engine": "sglang"}, git_patches=one)
    assert sglang.requirements[0] == f"sglang @ file://{sglang.source_dir}/python"
    with pytest.raises(ValueError, match=r"^inference_engine_git_patches: apply to a git build"):
        engine_build.plan(**{**common, "git_ref": "", "git_commit": ""}, git_patches=one)
    with pytest.raises(ValueError, match=r"^inference_engine_git_patches\[0\]: must be resolved"):
        engine_build.plan(**common, git_patches=[{"ref": "refs/pull/1/head", "commit": ""}])
