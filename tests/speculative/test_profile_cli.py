"""`specops profile ...` commands and the Ansible filters, through their real entry points."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.filter.speculative import FilterModule
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import FLAG_LISTS

from specops import cli
from specops.speculative import table

REPO = Path(__file__).resolve().parents[2]
# The generated "method x engine -> flags" table lives in the speculative profiles page.
PROFILES_DOC = REPO / "docs" / "speculative.md"


def test_render_prints_the_argv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yml"
    profile.write_text(
        "speculative:\n  method: dflash\n  draft_model: /srv/d\n  num_draft_tokens: 16\n"
        "  draft_window: 2048\n"
    )
    assert cli.main(["profile", "render", "--engine", "sglang", "--version", "0.5.11",
                     "--profile", str(profile)]) == 0  # fmt: skip
    assert capsys.readouterr().out == (
        "--speculative-algorithm DFLASH --speculative-draft-model-path /srv/d"
        " --speculative-num-draft-tokens 16 --speculative-dflash-draft-window-size 2048\n"
    )
    profile.write_text("method: ngram\nnum_draft_tokens: 5\nprompt_lookup_max: 4\n")
    assert cli.main(["profile", "render", "--engine", "vllm-cpu", "--version", "0.32",
                     "--profile", str(profile), "--format", "json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out) == {
        "argv": ["--speculative-config",
                 '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}'],
        "env": {},
    }  # fmt: skip


def test_render_rejects_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yml"
    profile.write_text("method: ddtree\ndraft_model: /d\ntree_budget: 8\n")
    assert cli.main(["profile", "render", "--engine", "vllm", "--version", "0.32.0",
                     "--profile", str(profile)]) == 2  # fmt: skip
    assert capsys.readouterr().err == (
        "specops profile render: error: speculative.method: vllm 0.32.0 cannot do 'ddtree';"
        " valid: none, mtp, eagle, eagle3, dflash, ngram, draft_model\n"
    )
    assert cli.main(["profile", "render", "--engine", "sglang", "--version", "0.5.11",
                     "--capability", "ddtree", "--profile", str(profile)]) == 0  # fmt: skip


def test_table_check_and_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "README.md"
    doc.write_text(f"# x\n\n{table.START}\nold\n{table.END}\n\nafter\n")
    assert cli.main(["profile", "table", "--check", str(doc)]) == 1
    assert "the profile table is stale" in capsys.readouterr().err
    assert cli.main(["profile", "table", "--write", str(doc)]) == 0
    assert cli.main(["profile", "table", "--check", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# x\n\n")
    assert text.endswith("\n\nafter\n")
    assert "| `method: mtp, num_steps: 3` | `--speculative-algorithm NEXTN" in text
    doc.write_text("no markers\n")
    assert cli.main(["profile", "table", "--check", str(doc)]) == 2


def test_speculative_profiles_doc_table_is_current() -> None:
    assert table.check_file(PROFILES_DOC), "run: specops profile table --write " + str(PROFILES_DOC)


def test_check_drafter_command(drafter_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = str(drafter_fixtures / "qwen3_6-27b-target")
    args = ["profile", "check-drafter", "--target", target, "--window", "2048"]
    assert cli.main([*args, "--drafter", str(drafter_fixtures / "qwen3_6-27b-dflash")]) == 0
    capsys.readouterr()
    bad = str(drafter_fixtures / "qwen3_6-27b-dflash-corrupted")
    assert cli.main([*args, "--drafter", bad, "--json"]) == 1
    fields = [f["field"] for f in json.loads(capsys.readouterr().out)]
    assert fields == [
        "drafter.dflash_config.mask_token_id",
        "drafter.dflash_config.target_layer_ids[4]",
        "drafter.layer_types",
    ]


def test_check_drafter_takes_hub_ids_from_a_hub_cache(
    drafter_fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hub ids read from a hub cache (a node's <cache_dir>/hub copied here, or this
    machine's): the seed drafter by its id fits; its id also picks the known-drafter entry."""
    cache = tmp_path / "hub"
    for hub_id, fixture in (("Qwen/Qwen3.6-27B", "qwen3_6-27b-target"),
                            ("z-lab/Qwen3.6-27B-DFlash", "qwen3_6-27b-dflash")):  # fmt: skip
        repo = cache / ("models--" + hub_id.replace("/", "--"))
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("c" * 40)
        (repo / "snapshots").mkdir()
        shutil.copytree(drafter_fixtures / fixture, repo / "snapshots" / ("c" * 40))
    argv = ["profile", "check-drafter", "--target", "Qwen/Qwen3.6-27B",
            "--drafter", "z-lab/Qwen3.6-27B-DFlash", "--hub-cache", str(cache)]  # fmt: skip
    assert cli.main(argv) == 0
    assert "(known drafter z-lab/Qwen3.6-27B-DFlash)" in capsys.readouterr().out


FILTERS = FilterModule().filters()


def test_filters_render_and_validate() -> None:
    profile = {"method": "mtp", "num_steps": 2}
    assert FILTERS["speculative_launch"](profile, "vllm", "0.32.0") == {
        "argv": ["--speculative-config", '{"method":"mtp","num_speculative_tokens":2}'],
        "env": {},
        "profile": {"method": "mtp", "num_steps": 2},
    }
    assert FILTERS["speculative_validate"](profile) == {"method": "mtp", "num_steps": 2}
    ddtree = {"method": "ddtree", "draft_model": "/d", "tree_budget": 4, "topk": 2}
    launched = FILTERS["speculative_launch"](ddtree, "sglang", "0.5.11", ["ddtree"])
    assert launched["env"] == {"SGLANG_DDTREE_MAX_TOPK": "2"}
    assert launched["argv"][:2] == ["--speculative-algorithm", "DDTREE"]
    assert launched["profile"] == ddtree


def test_filters_fail_with_the_field() -> None:
    with pytest.raises(AnsibleFilterError, match=r"^speculative_launch: svc_spec\.topk: vllm"):
        FILTERS["speculative_launch"](
            {"method": "mtp", "num_steps": 2, "topk": 2, "num_draft_tokens": 4},
            "vllm", "0.32.0", name="svc_spec",
        )  # fmt: skip
    with pytest.raises(AnsibleFilterError, match=r"^speculative_launch: speculative\.draft_w"):
        FILTERS["speculative_launch"](
            {"method": "dflash", "draft_model": "/d", "num_draft_tokens": 16, "draft_window": 2048},
            "vllm", "0.32.0",
        )  # fmt: skip
    # The profile alone (no engine): its own checks, the variable named.
    with pytest.raises(
        AnsibleFilterError,
        match=r"^speculative_validate: rollout_profile\.method: must be one of none, mtp",
    ):
        FILTERS["speculative_validate"]({"method": "medusa"}, name="rollout_profile")


def test_render_against_an_installed_flag_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM 0.21.0 (say, a PR build's version) has no recorded list; its installed build's
    flag set renders it."""
    recorded = json.loads((FLAG_LISTS / "vllm-0.32.0-flags.json").read_text(encoding="utf-8"))
    flags = tmp_path / "flags.json"
    flags.write_text(json.dumps({**recorded, "version": "0.21.0", "source": "a PR build"}))
    profile = tmp_path / "p.yml"
    profile.write_text(
        "method: dflash\ndraft_model: z-lab/Qwen3.6-27B-DFlash\nnum_draft_tokens: 16\n"
    )
    argv = ["profile", "render", "--engine", "vllm", "--version", "0.21.0", "--profile",
            str(profile)]  # fmt: skip
    assert cli.main([*argv, "--flags", str(flags)]) == 0
    assert capsys.readouterr().out == (
        '--speculative-config \'{"method":"dflash","model":"z-lab/Qwen3.6-27B-DFlash",'
        '"num_speculative_tokens":15}\'\n'
    )
    assert cli.main(argv) == 2  # without it: no recorded list for 0.21.0
    assert "no extracted flag list for vllm '0.21.0'" in capsys.readouterr().err
