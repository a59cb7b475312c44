"""The GPU doctor's diagnosis on evidence built from the lab hosts' facts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.diagnosis import (
    Expectation,
    build_text,
    diagnose,
    render_table,
)
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.evidence import (
    build_evidence,
)
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.router import router_views
from ansible_collections.specops.infra.plugins.modules.gpu_doctor import diagnose_records
from doctor.conftest import ct_ev, generated, node_ev

CARD = "0000:41:00.0"  # Device Minor 2 on pve-b
PATHS = ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia2", "/dev/nvidiactl"]
WANT = Expectation(gpus=(CARD,))


def codes(diagnosis: Any) -> list[str]:
    return [f.code for f in diagnosis.findings]


def test_generated_lines_are_healthy(pve_b: dict[str, Any]) -> None:
    node = node_ev(pve_b, generated(pve_b, [CARD]))
    assert node["paths"] == PATHS
    result = diagnose("ct901", node, ct_ev(pve_b, PATHS), WANT)
    assert codes(result) == []
    assert result.status == "healthy"
    assert result.checks["devices"] == "4/4 open"
    # devN entries (PVE >= 8.1): PVE allows each node's own numbers at start.
    node = node_ev(pve_b, generated(pve_b, [CARD], method="dev"))
    assert node["conf"]["devs"]
    assert not node["conf"]["allow"]
    assert codes(diagnose("ct901", node, ct_ev(pve_b, PATHS), WANT)) == []


def test_stale_uvm_major(pve_b: dict[str, Any]) -> None:
    """Allow lines of another host's uvm major (506): nvidia-smi works, CUDA does not."""
    text = generated(pve_b, [CARD]).replace("c 511:", "c 506:")
    failed = {"ok": False, "step": "cuInit", "cuInit": "CUDA_ERROR_UNKNOWN"}
    ct = ct_ev(
        pve_b,
        PATHS,
        opens={"/dev/nvidia-uvm": "EPERM", "/dev/nvidia-uvm-tools": "EPERM"},
        cuda={"python": "/x/bin/python3", "driver_api": failed},
    )
    result = diagnose("ct901", node_ev(pve_b, text), ct, WANT)
    assert codes(result) == ["stale_uvm_major"]
    (finding,) = result.findings
    assert finding.title == "stale nvidia-uvm major"
    assert "major 506" in finding.cause
    assert "nvidia-uvm is major 511 on pve-b" in finding.cause
    assert "playbooks/container.yml --limit pve-b,ct901" in finding.fix
    assert finding.paths == ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
    assert result.checks["nvidia_smi"] == "580.126.09"
    assert result.checks["cuda"] == "cuInit: CUDA_ERROR_UNKNOWN"
    # 509 is nvidia-nvswitch on pve-b: an allow line for it is still another host's uvm.
    text = generated(pve_b, [CARD]).replace("c 511:", "c 509:")
    assert codes(diagnose("ct901", node_ev(pve_b, text), ct, WANT)) == ["stale_uvm_major"]


def test_removed_allow_line(pve_b: dict[str, Any]) -> None:
    text = generated(pve_b, [CARD]).replace("lxc.cgroup2.devices.allow: c 195:2 rwm\n", "")
    ct = ct_ev(
        pve_b,
        PATHS,
        opens={"/dev/nvidia2": "EPERM"},
        smi={
            "present": True,
            "rc": 255,
            "ok": False,
            "mismatch": False,
            "output": "Failed to initialize NVML: Unknown Error\n",
        },
        cuda={"driver_api": {"ok": False, "step": "cuInit", "cuInit": "CUDA_ERROR_NO_DEVICE"}},
    )
    result = diagnose("ct901", node_ev(pve_b, text), ct, WANT)
    assert codes(result) == ["not_allowed"]
    assert result.findings[0].cause == (
        "/dev/nvidia2 (card 0000:41:00.0) is not allowed by the device cgroup (no"
        " lxc.cgroup2.devices.allow line for c 195:2 in /etc/pve/lxc/901.conf)"
    )
    assert result.findings[0].title == "node present but not allowed"
    # Every GPU allow line gone: every node, and no stale major claimed.
    text = "".join(
        ln for ln in generated(pve_b, [CARD]).splitlines(keepends=True) if "devices.allow" not in ln
    )
    result = diagnose("ct901", node_ev(pve_b, text), ct, WANT)
    assert codes(result) == ["not_allowed"]
    assert result.findings[0].paths == tuple(PATHS)
    # A deny line of the node's key takes the card away again.
    text = generated(pve_b, [CARD]) + "lxc.cgroup2.devices.deny: c 195:2 rwm\n"
    assert codes(diagnose("ct901", node_ev(pve_b, text), ct, WANT)) == ["not_allowed"]


def test_userspace_mismatch(pve_b: dict[str, Any]) -> None:
    smi = {
        "present": True,
        "rc": 18,
        "ok": False,
        "mismatch": True,
        "output": "Failed to initialize NVML: Driver/library version mismatch\n"
        "NVML library version: 575.64\n",
    }
    ct = ct_ev(pve_b, PATHS, smi=smi, userspace="575.64.05")
    result = diagnose("ct901", node_ev(pve_b, generated(pve_b, [CARD])), ct, WANT)
    assert codes(result) == ["userspace_mismatch"]
    finding = result.findings[0]
    assert finding.title == "userspace ≠ module"
    assert "575.64.05" in finding.cause
    assert "580.126.09" in finding.cause
    assert "--tags nvidia_userspace" in finding.fix
    assert finding.evidence[0] == "Failed to initialize NVML: Driver/library version mismatch"


def test_cards_on_vfio_and_held_by_vms(pve_a: dict[str, Any]) -> None:
    text = "arch: amd64\nrootfs: x\nlxc.cgroup2.devices.allow: c 195:0 rwm\n"
    node = node_ev(pve_a, text)
    result = diagnose("ct901", node, None, Expectation(gpus=("01:00.0",)))
    assert "card_on_vfio" in codes(result)
    assert "host_driver" in codes(result)  # pve-a has no driver loaded: checked first
    vfio = next(f for f in result.findings if f.code == "card_on_vfio")
    assert "bound to vfio-pci" in vfio.cause
    assert "vfio_release_addresses" in vfio.fix
    held = [g["address"] for g in pve_a["gpus"] if g["held_by_running_vm"]]
    result = diagnose("ct901", node, None, Expectation(gpus=(held[0],)))
    finding = next(f for f in result.findings if f.code == "card_held_by_vm")
    assert "running VM" in finding.cause


def test_card_held_when_model_and_count(pve_a: dict[str, Any]) -> None:
    facts = dict(pve_a, nvidia_module={"loaded": True, "version": "580.126.09"}, uvm_major=508)
    node = node_ev(facts, "arch: amd64\nrootfs: x\n")
    want = Expectation(gpu_model="NVIDIA GeForce RTX 3090", gpu_count=1)
    result = diagnose("ct901", node, None, want)
    assert "card_held_by_vm" in codes(result)


def test_minor_mismatch(pve_b: dict[str, Any]) -> None:
    text = generated(pve_b, [CARD]).replace("nvidia2", "nvidia7").replace("195:2", "195:7")
    result = diagnose("ct901", node_ev(pve_b, text), None, WANT)
    found = [f for f in result.findings if f.code == "minor_mismatch"]
    assert len(found) == 2
    assert "no card on pve-b has Device Minor 7" in found[0].cause
    assert "card 0000:41:00.0 (Device Minor 2) is missing" in found[1].cause


def test_allowed_but_missing_and_restart_pending(pve_b: dict[str, Any]) -> None:
    text = generated(pve_b, [CARD]).replace(
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n", ""
    )
    ct = ct_ev(pve_b, PATHS, opens={"/dev/nvidia-uvm": "ENOENT"})
    result = diagnose("ct901", node_ev(pve_b, text), ct, WANT)
    assert codes(result) == ["allowed_missing"]
    assert result.findings[0].paths == ("/dev/nvidia-uvm",)
    ct = ct_ev(pve_b, PATHS, opens={"/dev/nvidia2": "EPERM"})
    result = diagnose("ct901", node_ev(pve_b, generated(pve_b, [CARD])), ct, WANT)
    assert codes(result) == ["restart_pending"]
    assert "pct reboot 901 on pve-b" in result.findings[0].fix


def test_wrong_key_stale_node_no_driver(pve_b: dict[str, Any]) -> None:
    text = generated(pve_b, [CARD]).replace("lxc.cgroup2.", "lxc.cgroup.")
    result = diagnose("ct901", node_ev(pve_b, text), None, WANT)
    assert codes(result) == ["container_unreachable", "wrong_cgroup_key"]
    ct = ct_ev(pve_b, PATHS, numbers={"/dev/nvidia-uvm": (509, 0)})
    result = diagnose("ct901", node_ev(pve_b, generated(pve_b, [CARD])), ct, WANT)
    assert codes(result) == ["stale_node"]
    ct = ct_ev(pve_b, PATHS, opens={"/dev/nvidia2": "ENXIO"})
    node = node_ev(pve_b, generated(pve_b, [CARD]))
    assert codes(diagnose("ct901", node, ct, WANT)) == ["no_driver_answer"]
    # The lab's hardware stand-in: ENXIO is what an allowed node gives there.
    assert codes(diagnose("ct901", node, ct, WANT, simulated_hardware=True)) == []


def test_server_stopped_unreachable_no_conf(pve_b: dict[str, Any]) -> None:
    node = node_ev(pve_b, generated(pve_b, [CARD]))
    server = {
        "url": "http://127.0.0.1:9",
        "ok": False,
        "stage": "health",
        "detail": "http://127.0.0.1:9: cannot connect (Connection refused)",
    }
    result = diagnose("ct901", node, ct_ev(pve_b, PATHS, server=server), WANT)
    assert codes(result) == ["server_down"]
    assert "playbooks/serve.yml --limit ct901" in result.findings[0].fix
    stopped = node_ev(pve_b, generated(pve_b, [CARD]), running=False)
    assert codes(diagnose("ct901", stopped, None, WANT)) == ["container_stopped"]
    assert codes(diagnose("ct901", node_ev(pve_b, None), None, WANT)) == ["no_conf"]


def test_module_records_and_table(pve_b: dict[str, Any]) -> None:
    node = node_ev(pve_b, generated(pve_b, [CARD]))
    out = diagnose_records(
        [
            {
                "name": "ct901",
                "node_evidence": node,
                "container_evidence": ct_ev(pve_b, PATHS),
                "expect": {"gpus": [CARD]},
            },
            {
                "name": "ct902",
                "node": "pve-c",
                "vmid": 902,
                "node_evidence": {},
                "container_evidence": None,
            },
        ]
    )
    assert out["healthy"] is False
    assert out["counts"] == {"healthy": 1, "warning": 0, "unhealthy": 1}
    assert [r["status"] for r in out["results"]] == ["healthy", "unhealthy"]
    assert out["results"][1]["findings"][0]["code"] == "no_node_evidence"
    table = out["table"]
    assert table[0].startswith("| container | node | CT | devices | nvidia-smi | CUDA |")
    assert table[2].startswith("| ct901 | pve-b | 901 | 4/4 open | 580.126.09 | ok |")
    assert table[-1] == "2 container(s): 1 healthy, 0 warning, 1 unhealthy"
    assert render_table(out["results"]) == table


# -- the router in front of a container (issue 51) ---------------------------------------


def _view(**stat: object) -> dict[str, object]:
    row = {"server": "ct1", "status": "UP", "up": True, "admin": "ready",
           "check_status": "L7OK", "check_code": "200", "last_check": ""}  # fmt: skip
    row.update(stat)
    return {"item": {"router": "lb-1", "backend": "specops_m", "server": "ct1"},
            "servers": [row], "changed": False}  # fmt: skip


@pytest.mark.parametrize(
    ("result", "code", "column"),
    [
        (_view(), None, "lb-1 UP"),
        (_view(status="DOWN", up=False, check_status="L4CON", check_code=""), "router_down",
         "lb-1 DOWN"),
        (_view(status="DRAIN", up=False, admin="drain"), "router_drained", "lb-1 DRAIN"),
        ({**_view(), "servers": []}, "router_missing", "lb-1 absent"),
        ({**_view(), "failed": True, "msg": "cannot reach HAProxy's runtime API"},
         "router_unreachable", "lb-1 ?"),
    ],
)  # fmt: skip
def test_the_router_s_view_of_a_container_is_part_of_its_diagnosis(
    result: dict[str, object], code: str | None, column: str
) -> None:
    views = router_views([result])
    node = {"host": {"node": "pve-b"}, "vmid": 801, "conf": {}}
    d = diagnose("ct1", node, {"server": {"ok": True}}, Expectation(gpu=False), routers=views)
    assert [f.code for f in d.findings] == ([code] if code else [])
    assert d.checks["router"] == column
    if code == "router_drained":
        assert d.status == "warning"


def test_the_report_names_the_build_the_unit_runs(tmp_path: Path) -> None:
    """Issue 49: the doctor shows the engine build a container serves, a base and the pull
    requests applied on it in order, from the venv's stamp (what inference_engine built)."""
    venv = tmp_path / "vllm-git"
    (venv / "bin").mkdir(parents=True)
    patches = [f"refs/pull/40727/head@{'b' * 40}", f"refs/pull/40898/head@{'c' * 40}"]
    key = {"engine": "vllm", "version": "", "git_ref": "refs/tags/v0.20.1",
           "git_commit": "a" * 40, "git_patches": patches}  # fmt: skip
    (venv / ".specops-engine.json").write_text(json.dumps({"key": key}))
    build = build_evidence(str(venv / "bin" / "python"))
    assert build_text(build) == (
        f"vllm git refs/tags/v0.20.1 ({'a' * 12}) + refs/pull/40727/head ({'b' * 12})"
        f" + refs/pull/40898/head ({'c' * 12})"
    )
    assert build_text(build_evidence(str(tmp_path / "none" / "bin" / "python"))) == ""
    wheel = {**key, "version": "0.5.11", "git_ref": "", "git_commit": "", "engine": "sglang"}
    (venv / ".specops-engine.json").write_text(json.dumps({"key": wheel}))
    assert build_text(build_evidence(str(venv / "bin" / "python"))) == "sglang 0.5.11"
    lines = render_table([{"container": "ct1", "status": "healthy", "findings": [],
                           "build": "sglang 0.5.11"}])  # fmt: skip
    assert "- ct1 build: sglang 0.5.11" in lines


# --------------------------------------------------------------------------- multi-card

PRO = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
FOUR = ["0000:01:00.0", "0000:21:00.0", "0000:41:00.0", "0000:61:00.0"]  # minors 0-3


@pytest.mark.parametrize("count", [2, 4])
def test_multi_card_container_second_card_removed_is_named(
    pve_b: dict[str, Any], count: int
) -> None:
    """A container of 2 (4) cards: healthy with a row per card; the second card's allow
    line removed (raw) or its devN entry removed (dev) names that card, by address."""
    cards = FOUR[:count]
    want = Expectation(gpu_model=PRO, gpu_count=count)
    text = generated(pve_b, cards)
    node = node_ev(pve_b, text)
    result = diagnose("ct901", node, ct_ev(pve_b, node["paths"]), want)
    assert codes(result) == []
    assert [(r["address"], r["state"]) for r in result.cards] == [(a, "ok") for a in cards]
    table = render_table([result.to_dict()])
    assert f"- ct901 cards: {cards[0]} /dev/nvidia0 ok; {cards[1]} /dev/nvidia1 ok" in table[-2]

    # Raw lines: the second card's cgroup line gone; its node is bound in but denied.
    text = generated(pve_b, cards).replace("lxc.cgroup2.devices.allow: c 195:1 rwm\n", "")
    node = node_ev(pve_b, text)
    ct = ct_ev(pve_b, node["paths"], opens={"/dev/nvidia1": "EPERM"})
    result = diagnose("ct901", node, ct, want)
    assert codes(result) == ["not_allowed"]
    assert result.findings[0].cause.startswith("/dev/nvidia1 (card 0000:21:00.0) is not allowed")
    states = {r["address"]: r["state"] for r in result.cards}
    assert states == {a: ("not_allowed" if a == cards[1] else "ok") for a in cards}

    # devN entries: the second card's entry gone; the conf gives one card fewer.
    text = generated(pve_b, cards, method="dev")
    line = next(ln for ln in text.splitlines(keepends=True) if "/dev/nvidia1," in ln)
    node = node_ev(pve_b, text.replace(line, ""))
    result = diagnose("ct901", node, ct_ev(pve_b, node["paths"]), want)
    assert codes(result) == ["card_not_given"]
    cause = result.findings[0].cause
    assert f"gives {count - 1} of the {count} cards" in cause
    assert "missing: 1 card(s)" in cause
    assert "0000:21:00.0 (/dev/nvidia1)" in cause.split("without a node in this conf:")[1]
    # By address: the missing card is named as such, with its row.
    want = Expectation(gpus=tuple(cards))
    result = diagnose("ct901", node, ct_ev(pve_b, node["paths"]), want)
    assert codes(result) == ["minor_mismatch"]
    assert result.findings[0].cause.startswith("card 0000:21:00.0 (Device Minor 1) is missing")
    assert {"address": "0000:21:00.0", "path": "/dev/nvidia1", "state": "not given"} in (
        result.cards
    )
