"""``specops doctor``: reading verify.yml's results (Ansible's JSON callback) and its own
``--json`` report; the table comes from the collection's one renderer."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.modules.gpu_doctor import diagnose_records
from doctor.conftest import ct_ev, generated, node_ev

from specops import cli
from specops.doctor.cli import REPORT_TASK, report_from_callback
from specops.errors import SpecopsError

CARD = "0000:41:00.0"
PATHS = ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia2", "/dev/nvidiactl"]


def _callback(pve_b: dict[str, Any], *, stale: bool) -> dict[str, Any]:
    text = generated(pve_b, [CARD])
    if stale:
        text = text.replace("c 511:", "c 506:")
    record = {
        "name": "ct901",
        "node_evidence": node_ev(pve_b, text),
        "container_evidence": ct_ev(
            pve_b, PATHS, opens=dict.fromkeys(PATHS[:2], "EPERM") if stale else None
        ),
        "expect": {"gpus": [CARD]},
    }
    result = {"changed": False, **diagnose_records([record])}
    return {
        "plays": [
            {
                "play": {"name": "Serving containers"},
                "tasks": [
                    {"task": {"name": f"gpu_doctor : {REPORT_TASK}"}, "hosts": {"ct901": result}},
                ],
            },
        ],
        "stats": {"pve-b": {"changed": 0, "failures": 0}, "ct901": {"changed": 0, "failures": 1}},
    }


def test_report_from_callback(pve_b: dict[str, Any]) -> None:
    report = report_from_callback(_callback(pve_b, stale=True))
    assert report["healthy"] is False
    assert report["counts"] == {"healthy": 0, "warning": 0, "unhealthy": 1}
    assert report["changed"] == 0
    assert report["results"][0]["findings"][0]["code"] == "stale_uvm_major"
    assert report_from_callback(report) == report  # a saved --json report reads back


def test_cli_from_saved_run(
    pve_b: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "verify.json"
    saved.write_text(json.dumps(_callback(pve_b, stale=True)))
    assert cli.main(["doctor", "--from", str(saved)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| container | node | CT |")
    assert out[2].startswith("| ct901 | pve-b | 901 | 2/4 open | 580.126.09 |")
    assert "stale nvidia-uvm major" in out[3]
    assert out[-1] == "1 container(s): 0 healthy, 0 warning, 1 unhealthy"
    saved.write_text(json.dumps(_callback(pve_b, stale=False)))
    assert cli.main(["doctor", "--from", str(saved), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["healthy"] == 1


def test_no_diagnosis_names_the_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    callback = {
        "plays": [
            {
                "play": {"name": "Preflight"},
                "tasks": [
                    {
                        "task": {"name": "Ensure the inventory describes a deployable fleet."},
                        "hosts": {
                            "localhost": {
                                "failed": True,
                                "msg": "Inventory problems: ct9: pve_container_vmid is not set",
                            }
                        },
                    }
                ],
            }
        ],
        "stats": {},
    }
    with pytest.raises(
        SpecopsError, match=r"verify.yml gave no diagnosis: localhost: .*pve_container_vmid"
    ):
        report_from_callback(callback)
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(callback))
    assert cli.main(["doctor", "--from", str(saved)]) == 2
    assert "pve_container_vmid is not set" in capsys.readouterr().err


def test_a_long_run_says_it_is_still_at_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 49: the playbook's JSON callback prints nothing before its end, so the
    doctor says every PROGRESS_EVERY seconds that it is still running (here 0.2 s)."""
    from specops.doctor import cli as doctor_cli  # noqa: PLC0415

    monkeypatch.setattr(doctor_cli, "PROGRESS_EVERY", 0.2)
    script = "import time, json; time.sleep(1.1); print(json.dumps({'plays': []}))"
    out, _err, rc = doctor_cli._run_with_progress([sys.executable, "-c", script], {}, "verify.yml")
    assert rc == 0
    assert json.loads(out) == {"plays": []}
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3, lines
    assert all(line.startswith("specops doctor: verify.yml still running (") for line in lines)
