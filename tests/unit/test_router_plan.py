"""The router's plan from the inventory (module_utils/router_plan.py): one frontend per
served model, its backend every container of the group that serves it, the ports, the
refusals, and where a container is a server (what the rollout drains)."""

from __future__ import annotations

import pytest
from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError
from ansible_collections.specops.infra.plugins.module_utils.router_plan import (
    Server,
    backend_name,
    node_routers,
    plan,
)


def ct(model: str, host: str, port: int = 8000, **kw: object) -> dict[str, object]:
    return {"inference_service_served_model_name": model, "inference_service_host": host,
            "inference_service_port": port, **kw}  # fmt: skip


SERVING = {
    "ct129": ct("qwen3.6-27b", "10.20.1.129"),
    "ct130": ct("qwen3.6-27b", "10.20.1.130"),
    "ct131": ct("qwen3.5-122b", "10.20.1.131", 30000),
}
# An address of the example inventory's (data only: the plan dials nothing).
ADDRESS = str(SERVING["ct129"]["inference_service_host"])


def test_one_frontend_per_model_every_container_of_it_a_server() -> None:
    fes = plan(SERVING)
    assert [(f.model, f.backend, f.port) for f in fes] == [
        ("qwen3.5-122b", "specops_qwen3.5-122b", 8000),
        ("qwen3.6-27b", "specops_qwen3.6-27b", 8001),
    ]
    assert fes[1].servers == (Server("ct129", "10.20.1.129", 8000),
                              Server("ct130", "10.20.1.130", 8000))  # fmt: skip
    assert fes[0].servers == (Server("ct131", "10.20.1.131", 30000),)


def test_router_models_fix_ports_and_the_rest_take_the_next_free() -> None:
    fes = plan(SERVING, models={"qwen3.6-27b": 8000}, first_port=8000)
    assert {f.model: f.port for f in fes} == {"qwen3.6-27b": 8000, "qwen3.5-122b": 8001}


def test_a_wildcard_listener_is_dialled_at_the_inventory_address() -> None:
    (fe,) = plan({"ct1": ct("m", "0.0.0.0", ansible_host=ADDRESS)})
    assert fe.servers[0].address == ADDRESS


@pytest.mark.parametrize(
    ("serving", "models", "field", "why"),
    [
        ({"ct1": ct("m", "127.0.0.1")}, {}, "ct1: inference_service_host", "reachable on ct1 only"),
        ({"ct1": ct("", ADDRESS)}, {}, "ct1: inference_service_served_model_name", "needs"),
        ({"ct1": ct("m", ADDRESS, 70000)}, {}, "ct1: inference_service_port", "1..65535"),
        (SERVING, {"nope": 9000}, "router_models", "no container of the group serves it"),
        (SERVING, {"qwen3.6-27b": 9000, "qwen3.5-122b": 9000}, "router_models.qwen3.6-27b",
         "port 9000 is qwen3.5-122b's already"),
    ],
)  # fmt: skip
def test_refused_with_the_field_and_why(
    serving: dict[str, dict[str, object]], models: dict[str, int], field: str, why: str
) -> None:
    with pytest.raises(ValidationError) as err:
        plan(serving, models=models)
    assert err.value.field == field
    assert why in str(err.value)


def test_a_container_is_drained_in_every_router_that_holds_it() -> None:
    routers = {"lb-1": plan(SERVING), "lb-2": plan({"ct129": SERVING["ct129"]})}
    assert node_routers("ct129", routers) == [
        {"router": "lb-1", "backend": "specops_qwen3.6-27b", "server": "ct129",
         "model": "qwen3.6-27b", "port": 8001, "servers": 2},
        {"router": "lb-2", "backend": "specops_qwen3.6-27b", "server": "ct129",
         "model": "qwen3.6-27b", "port": 8000, "servers": 1},
    ]  # fmt: skip
    assert node_routers("ct999", routers) == []


def test_backend_names_keep_only_haproxy_characters() -> None:
    assert backend_name("org/Model 7B") == "specops_org_Model_7B"
