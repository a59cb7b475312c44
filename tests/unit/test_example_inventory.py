"""The example inventory is right for every host it describes (issue 49).

Each serving container of ``inventory/example`` has its own ``host_vars/<host>.yml``
whose first sentence (its leading comment) says what it serves:

    # <model> on <N>x <card> of <node>: <engine> <version>, TP <n>, served as <name>.

Every host is rendered as Ansible renders it (``ansible-inventory --list``: group_vars
under host_vars, the collection's vars plugin) and held to its own line: the model, the
cards, the node, the engine and the version its pin resolves to, the tensor-parallel
size its engine arguments give, ``CUDA_VISIBLE_DEVICES`` and the served name. A host
that inherits another container's settings from group_vars (as ``ct131-qwen122b``
inherited the 27B's model, TP 2 and two devices) fails here, and the controller
preflight passes the example.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.specops.infra.plugins.module_utils.engine.build import model_pin
from ansible_collections.specops.infra.plugins.plugin_utils.inventory import (
    inventory_problems,
    role_defaults,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example"
HEADLINE = re.compile(
    r"^# (?P<model>\S+) on (?P<count>\d+)x (?P<card>.+?) of (?P<node>\S+): "
    r"(?P<engine>SGLang|vLLM) (?P<version>\S+), TP (?P<tp>\d+), served as (?P<served>\S+)\.$"
)
TP_FLAGS = ("--tp-size", "--tensor-parallel-size")


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    """``ansible-inventory --list`` of the example: groups and every host's variables."""
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(EXAMPLE), "--list"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=120,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )  # fmt: skip
    return dict(json.loads(proc.stdout))


def _serving(rendered: dict[str, Any]) -> list[str]:
    return list(rendered["serving"]["hosts"])


def _headline(host: str) -> re.Match[str]:
    path = EXAMPLE / "host_vars" / f"{host}.yml"
    assert path.is_file(), f"{host}: a serving container describes itself in {path}"
    lines = [line for line in path.read_text().splitlines() if line != "---"]
    sentence: list[str] = []
    for line in lines:  # the first sentence of the leading comment, over its lines
        if not line.startswith("# "):
            break
        sentence.append(line.removeprefix("# "))
        if line.endswith("."):
            break
    match = HEADLINE.match("# " + " ".join(sentence))
    assert match, f"{path}: its first sentence must say what it serves ({HEADLINE.pattern})"
    return match


def _tp(args: list[str]) -> int:
    for i, word in enumerate(args):
        name, _eq, inline = word.partition("=")
        if name in TP_FLAGS:
            return int(inline or args[i + 1])
    return 1


def test_every_serving_host_has_its_own_host_vars(rendered: dict[str, Any]) -> None:
    hosts = _serving(rendered)
    assert len(hosts) >= 2
    for host in hosts:
        _headline(host)


def test_every_serving_host_renders_what_its_host_vars_say(rendered: dict[str, Any]) -> None:
    hostvars = rendered["_meta"]["hostvars"]
    pins = role_defaults(REPO / "roles")["inference_engine_model_pins"]
    seen_models: dict[str, set[str]] = {}
    for host in _serving(rendered):
        said = _headline(host).groupdict()
        hv = hostvars[host]
        count = int(said["count"])
        assert hv["inference_engine_model"] == said["model"], host
        assert hv["lxc_gpu_passthrough_gpu_model"] == said["card"], host
        assert hv["lxc_gpu_passthrough_gpu_count"] == count, host
        assert hv["pve_container_node"] == said["node"], host
        assert hv["inference_engine_engine"] == said["engine"].lower(), host
        version = model_pin(
            hv["inference_engine_engine"], hv.get("inference_engine_version", ""),
            hv["inference_engine_model"], hv.get("inference_engine_model_pins", pins),
        ).version  # fmt: skip
        assert version == said["version"], host
        assert _tp(hv["inference_service_engine_args"]) == int(said["tp"]) == count, host
        devices = hv["inference_service_cuda_visible_devices"].split(",")
        assert devices == [str(i) for i in range(count)], host
        assert hv["inference_service_served_model_name"] == said["served"], host
        seen_models.setdefault(said["model"], set()).add(host)
    # Each example container its own model, but for replicas behind a router (issue 51):
    # the containers of one model are one served name, a backend of every router.
    routed = {
        name for router in rendered.get("routers", {}).get("hosts", [])
        for name in hostvars[router].get("router_models", {})
    }  # fmt: skip
    for model, hosts in seen_models.items():
        if len(hosts) > 1:
            served = {hostvars[h]["inference_service_served_model_name"] for h in hosts}
            assert len(served) == 1, (model, sorted(hosts))
            assert served <= routed, f"{model}: {sorted(hosts)} serve it with no router"


def test_the_122b_container_has_its_own_model_and_four_card_tp(rendered: dict[str, Any]) -> None:
    hv = rendered["_meta"]["hostvars"]["ct131-qwen122b"]
    assert hv["inference_engine_model"] == "Qwen/Qwen3.5-122B-A10B"
    assert hv["inference_service_served_model_name"] == "qwen3.5-122b"
    assert _tp(hv["inference_service_engine_args"]) == 4
    assert hv["inference_service_cuda_visible_devices"] == "0,1,2,3"


def test_the_group_vars_state_nothing_one_container_serves() -> None:
    """What a container serves is in its host_vars only: a group default would be
    inherited silently by the next container copied from the example."""
    per_host = {
        "inference_engine_engine", "inference_engine_version", "inference_engine_model",
        "inference_service_served_model_name", "inference_service_engine_args",
        "inference_service_cuda_visible_devices", "inference_service_speculative",
        "lxc_gpu_passthrough_gpu_model", "lxc_gpu_passthrough_gpu_count",
    }  # fmt: skip
    for path in sorted((EXAMPLE / "group_vars").rglob("*.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        assert not per_host & set(data), f"{path}: {sorted(per_host & set(data))}"


def test_the_preflight_refuses_the_old_example_shape(rendered: dict[str, Any]) -> None:
    """The control: ct131 with the 27B's TP 2 and two devices (what group_vars gave it)
    is refused by the controller preflight, naming the host and the variables."""
    groups = {g: list(rendered[g]["hosts"]) for g in ("pve_nodes", "serving")}
    hostvars = {h: dict(v) for h, v in rendered["_meta"]["hostvars"].items()}
    for hv in hostvars.values():
        hv.pop("inference_service_host", None)  # a template; the preflight renders it
    assert inventory_problems(groups, hostvars, roles=REPO / "roles") == []
    hostvars["ct131-qwen122b"].update({
        "inference_service_engine_args": ["--tp-size", "2", "--context-length", "131072"],
        "inference_service_cuda_visible_devices": "0,1",
    })  # fmt: skip
    problems = inventory_problems(groups, hostvars, roles=REPO / "roles")
    assert [p.split(": ", 2)[:2] for p in problems] == [
        ["ct131-qwen122b", "inference_service_engine_args"],
        ["ct131-qwen122b", "inference_service_cuda_visible_devices"],
    ], problems
    assert "TP 2 x PP 1 x DP 1 = 2 card(s), but the container gets 4" in problems[0]
