"""Which cards a node releases from vfio-pci: exactly those its containers ask for
(issue 16, fault 1: the example inventory said nothing, so every node's vfio_release
refused "not both and not neither")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.specops.infra.plugins.filter.inventory import FilterModule
from ansible_collections.specops.infra.plugins.plugin_utils.inventory import (
    NodeRelease,
    vfio_release_request,
)

from specops.errors import ValidationError

REPO = Path(__file__).resolve().parents[2]


def ct(node: str, **gpu: Any) -> dict[str, Any]:
    return {"pve_container_node": node, **gpu}


def test_model_requests_of_a_node_are_summed_and_other_nodes_ignored() -> None:
    groups = {"serving": ["a", "b", "c"]}
    hv = {
        "a": ct(
            "n1", lxc_gpu_passthrough_gpu_model="NVIDIA RTX A6000", lxc_gpu_passthrough_gpu_count=2
        ),
        "b": ct("n1", lxc_gpu_passthrough_gpu_model="NVIDIA RTX A6000"),  # count defaults to 1
        "c": ct(
            "n2", lxc_gpu_passthrough_gpu_model="NVIDIA RTX A6000", lxc_gpu_passthrough_gpu_count=4
        ),
    }
    assert vfio_release_request(groups, hv, "n1") == NodeRelease(
        model="NVIDIA RTX A6000", count=3, containers=("a", "b")
    )
    assert vfio_release_request(groups, hv, "n2").count == 4


def test_address_requests_are_united_in_order() -> None:
    groups = {"serving": ["a", "b"]}
    hv = {
        "a": ct("n1", lxc_gpu_passthrough_gpus=["0000:01:00.0", "0000:02:00.0"]),
        "b": ct("n1", lxc_gpu_passthrough_gpus=["0000:02:00.0", "0000:41:00.0"]),
    }
    got = vfio_release_request(groups, hv, "n1")
    assert got.addresses == ("0000:01:00.0", "0000:02:00.0", "0000:41:00.0")
    assert (got.model, got.count) == ("", 0)


def test_a_node_without_gpu_containers_releases_nothing() -> None:
    groups = {"serving": ["cpu", "gone", "elsewhere"]}
    hv = {
        "cpu": ct("n1"),  # a CPU-only container
        "gone": ct("n1", lxc_gpu_passthrough_gpu_model="A6000", lxc_gpu_passthrough_state="absent"),
        "elsewhere": ct("n2", lxc_gpu_passthrough_gpu_model="A6000"),
    }
    assert vfio_release_request(groups, hv, "n1") == NodeRelease()
    assert vfio_release_request({}, {}, "n1").as_vars() == {
        "addresses": [],
        "model": "",
        "count": 0,
        "containers": [],
    }


@pytest.mark.parametrize(
    ("hv", "says"),
    [
        (
            {
                "a": ct("n1", lxc_gpu_passthrough_gpus=["0000:01:00.0"]),
                "b": ct("n1", lxc_gpu_passthrough_gpu_model="A6000"),
            },
            "by address (a) and by model (b)",
        ),
        (
            {
                "a": ct("n1", lxc_gpu_passthrough_gpu_model="A6000"),
                "b": ct("n1", lxc_gpu_passthrough_gpu_model="RTX 3090"),
            },
            "more than one model (A6000: a; RTX 3090: b)",
        ),
        (
            {"a": ct("n1", lxc_gpu_passthrough_gpu_model="A6000", lxc_gpu_passthrough_gpu_count=0)},
            "a: lxc_gpu_passthrough_gpu_count: must be an integer >= 1 (got 0)",
        ),
        (
            {"a": ct("n1", lxc_gpu_passthrough_gpus="0000:01:00.0")},
            "a: lxc_gpu_passthrough_gpus: must be a list",
        ),
    ],
)
def test_requests_that_are_not_one_request_name_the_hosts(hv: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as err:
        vfio_release_request({"serving": sorted(hv)}, hv, "n1")
    assert says in str(err.value)


def test_filter_gives_the_roles_variables_from_templated_hostvars() -> None:
    release = FilterModule().filters()["vfio_release_request"]
    hv = {"a": ct("n1", lxc_gpu_passthrough_gpu_model="A6000", lxc_gpu_passthrough_gpu_count="2")}
    assert release({"serving": ["a"]}, hv, "n1") == {
        "addresses": [],
        "model": "A6000",
        "count": 2,
        "containers": ["a"],
    }
    with pytest.raises(ValueError, match="n1: vfio_release"):
        release(
            {"serving": ["a", "b"]}, {**hv, "b": ct("n1", lxc_gpu_passthrough_gpus=["01:00"])}, "n1"
        )


def test_example_inventory_releases_what_its_containers_need() -> None:
    """The example fleet: gpu-node-01 gives ct129 two A6000, gpu-node-02 gives ct131
    four RTX PRO 6000, gpu-node-03 gives ct130 (the 27B's second container) two A6000;
    the router beside it (ct128, group routers) asks for none."""
    groups = yaml.safe_load((REPO / "inventory/example/hosts.yml").read_text())
    serving = list(groups["all"]["children"]["serving"]["hosts"])
    hv = {
        h: yaml.safe_load((REPO / f"inventory/example/host_vars/{h}.yml").read_text())
        for h in serving
    }
    got = {
        n: vfio_release_request({"serving": serving}, hv, n)
        for n in ("gpu-node-01", "gpu-node-02", "gpu-node-03")
    }
    assert (got["gpu-node-01"].model, got["gpu-node-01"].count) == ("NVIDIA RTX A6000", 2)
    assert got["gpu-node-02"].count == 4
    assert (got["gpu-node-03"].model, got["gpu-node-03"].count) == ("NVIDIA RTX A6000", 2)
    assert got["gpu-node-03"].containers == ("ct130-qwen27b",)
