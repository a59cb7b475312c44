from __future__ import annotations

from typing import Any

from ansible_collections.specops.infra.plugins.plugin_utils.inventory import inventory_problems

NODES = {"pve_nodes": ["pve-a", "pve-b"]}


def ct(node: str = "pve-a", vmid: int = 101, **extra: Any) -> dict[str, Any]:
    return {"pve_container_node": node, "pve_container_vmid": vmid, **extra}


def test_deployable_inventory_has_no_problems() -> None:
    groups = {**NODES, "serving": ["ct101", "ct102"]}
    hv = {
        "ct101": ct(
            vmid=101,
            inference_engine_engine="vllm-cpu",
            inference_engine_version="0.32.0",
            inference_service_speculative={"method": "ngram", "num_draft_tokens": 4},
        ),
        "ct102": ct("pve-b", 102),
    }
    assert inventory_problems(groups, hv) == []


def test_missing_groups_are_named() -> None:
    assert inventory_problems({"pve_nodes": []}, {}) == [
        "inventory: group serving is missing (see inventory/example/hosts.yml)"
    ]


def test_node_vmid_and_profile_problems_name_host_and_variable() -> None:
    groups = {**NODES, "serving": ["a", "b", "c", "d"]}
    hv = {
        "a": ct("pve-z", 101),
        "b": ct("pve-a", 101),
        "c": {"pve_container_vmid": True},
        "d": ct(
            vmid=104,
            inference_engine_engine="vllm",
            inference_engine_version="0.32.0",
            inference_service_speculative={
                "method": "ddtree",
                "draft_model": "x",
                "tree_budget": 32,
            },
        ),
    }
    problems = inventory_problems(groups, hv)
    assert problems[0] == (
        "a: pve_container_node: 'pve-z' is not in group pve_nodes (have: pve-a, pve-b)"
    )
    assert problems[1] == "b: pve_container_vmid: 101 is also used by a"
    assert problems[2] == "c: pve_container_node is not set (one of: pve-a, pve-b)"
    assert problems[3] == "c: pve_container_vmid: must be an integer 100-999999999 (True)"
    assert problems[4].startswith("d: inference_service_speculative.method: ")
    assert "cannot do 'ddtree'" in problems[4]
    assert len(problems) == 5


def test_a_branch_build_without_a_recorded_list_is_left_to_the_installed_flags() -> None:
    """A git build on vLLM 0.21.0 (no recorded flag list): the profile's shape is checked
    here, its flags on the node against what the built engine accepts. The same version
    as a released wheel is refused: nothing could check its arguments before the build."""
    groups = {**NODES, "serving": ["a", "b", "c"]}
    dflash = {"method": "dflash", "draft_model": "z-lab/Qwen3.6-27B-DFlash", "num_draft_tokens": 16}
    git = {"inference_engine_git_ref": "refs/pull/40898/head"}
    hv = {
        "a": ct(vmid=101, inference_engine_engine="vllm", inference_engine_version="0.21.0",
                inference_service_speculative=dflash, **git),
        "b": ct(vmid=102, inference_engine_engine="vllm", inference_engine_version="0.21.0",
                inference_service_speculative={**dflash, "num_stepz": 3}, **git),
        "c": ct(vmid=103, inference_engine_engine="vllm", inference_engine_version="0.21.0",
                inference_service_speculative=dflash),
    }  # fmt: skip
    problems = inventory_problems(groups, hv)
    assert problems[0] == (
        "b: inference_service_speculative.num_stepz: unknown key; valid keys: method, num_steps,"
        " topk, num_draft_tokens, draft_model, draft_model_revision, draft_window, tree_budget,"
        " prompt_lookup_min, prompt_lookup_max, model_mtp_method, extra_args"
    )
    assert problems[1].startswith(
        "c: inference_engine_version: vllm 0.21.0 has no recorded flag list (known: 0.20.1,"
    ), problems
    assert "scripts/tools/extract-engine-flags.py" in problems[1]
    assert len(problems) == 2


def test_batching_accepts_nodes_and_percentages() -> None:
    groups = {**NODES, "serving": []}
    for batch, fail in ((1, 0), ("25%", 30), ("100%", 100), (4, "49")):
        hv = {n: {"specops_host_batch": batch, "specops_host_max_fail_percentage": fail}
              for n in NODES["pve_nodes"]}  # fmt: skip
        assert inventory_problems(groups, hv) == [], (batch, fail)


def test_a_bad_batch_is_named_with_what_is_valid() -> None:
    groups = {**NODES, "serving": []}
    hv = {n: {"specops_host_batch": "0%", "specops_host_max_fail_percentage": 150}
          for n in NODES["pve_nodes"]}  # fmt: skip
    problems = inventory_problems(groups, hv)
    assert problems[0].startswith("pve-a: specops_host_batch: '0%' is not a batch size")
    assert "never goes below one node" in problems[0]
    assert problems[1].startswith("pve-a: specops_host_max_fail_percentage: 150")
    assert len([p for p in problems if "specops_host_batch" in p]) == 2  # one per node
    for bad in (0, "101%", "a quarter", True):
        hv = {"pve-a": {"specops_host_batch": bad}}
        assert "specops_host_batch" in inventory_problems(groups, hv)[0], bad
