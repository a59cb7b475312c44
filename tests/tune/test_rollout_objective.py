"""The rollout's gate against no speculation judges on what the profile was chosen for.

Recorded on the H100 (SGLang 0.5.11, the noisy MTP oracle, 2026-12-06,
``tests/fixtures/gpu-serving/h100-sglang-oracle-2026-12-06-run2``): the sweep, asked for
one request's decode speed at C=1, picked NEXTN depth 4 (1.26x over none there); the
rollout of that pick onto a node was refused by gate plain on the mean over its smoke
cells, C=1 (x1.16) and C=16 (x0.81), a load it was not chosen for. With the sweep's
objective (``speculative_rollout_objective``, written into the sweep's
chosen-profile.yml) the gate judges the same measurements on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from plugins.scripts import REPO

from specops.bench.results import load_results
from specops.cli import main
from specops.errors import ValidationError
from specops.tune.config import load_config_file
from specops.tune.objective import Objective
from specops.tune.rollout import plain_gate, resolve_objective
from specops.tune.sweep import report_sweep

RUN2 = REPO / "tests/fixtures/gpu-serving/h100-sglang-oracle-2026-12-06-run2"
SMOKE = RUN2 / "rollout-better" / "smoke.results.json"
PLAIN = RUN2 / "rollout-better" / "plain.results.json"
LATENCY = {"kind": "latency", "concurrency": 1}


def _gate(objective: dict[str, object] | None):  # type: ignore[no-untyped-def]
    smoke = load_results(SMOKE)
    return plain_gate(
        load_results(PLAIN), smoke, throughput_drop=0.05,
        objective=resolve_objective(smoke.plan, objective),
    )  # fmt: skip


def test_the_device_refusal_is_the_mean_over_cells_the_profile_was_not_chosen_for() -> None:
    refused = _gate(None)
    assert (refused.ok, refused.gate) == (False, "plain")
    assert "x0.83" in refused.message
    assert "c16-ctx512 x0.81" in refused.message
    record = json.loads((RUN2 / "record.json").read_text())["steps"]["oracle-rollout-better"]
    assert record["smoke"]["message"] == refused.message.replace("10%", "5%")  # the device's


def test_on_the_objective_it_was_chosen_for_the_same_smoke_passes() -> None:
    passed = _gate(LATENCY)
    assert passed.ok is True
    assert "on the objective (per-request decode speed at C=1" in passed.message
    assert "(x1.25;" in passed.message  # 1000 / TPOT p50 at C=1, over no speculation's
    throughput = _gate({"kind": "throughput", "concurrency": 16})
    assert (throughput.ok, throughput.gate) == (False, "plain")


@pytest.mark.parametrize(
    ("objective", "key"),
    [
        ({"kind": "latency", "concurrency": 8}, "objective.concurrency"),
        ({"kind": "latncy"}, "objective.kind"),
        ({"kind": "throughput", "context": "4K"}, "objective.context"),
    ],
)
def test_an_objective_the_smoke_plan_cannot_judge_is_refused(
    objective: dict[str, object], key: str
) -> None:
    with pytest.raises(ValidationError) as err:
        resolve_objective(load_results(SMOKE).plan, objective)
    assert err.value.field == key


def test_the_cli_checks_an_objective_against_the_smoke_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = json.dumps({"model": "m", "concurrency": [1, 16], "context_lengths": [512]})
    assert main(["rollout", "objective", "--plan-json", plan,
                 "--objective-json", json.dumps(LATENCY)]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["objective"].startswith(
        "per-request decode speed at C=1, 512 tokens in"
    )
    assert main(["rollout", "objective", "--plan-json", plan,
                 "--objective-json", '{"kind": "latency", "concurrency": 4}']) == 2  # fmt: skip
    assert "objective.concurrency: 4 is not in the plan's concurrency" in capsys.readouterr().err


def test_the_sweep_writes_the_objective_beside_the_profile_it_chose(tmp_path: Path) -> None:
    """The chosen-profile.yml of the recorded sweep (latency at C=1, pick NEXTN depth 4)
    carries the objective into the inventory, read back as the same Objective."""
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.jsonl").write_bytes((RUN2 / "sweep.jsonl").read_bytes())
    cfg = load_config_file(RUN2 / "oracle-sweep-config.yml")
    report_sweep(cfg, out)
    chosen = yaml.safe_load((out / "chosen-profile.yml").read_text())
    assert chosen["inference_service_speculative"] == {"method": "mtp", "num_steps": 4}
    assert chosen["speculative_rollout_objective"] == {
        "kind": "latency", "concurrency": 1, "context": 512,
    }  # fmt: skip
    assert Objective.from_mapping(chosen["speculative_rollout_objective"]) == cfg.objective


@pytest.mark.slow
def test_the_role_passes_the_objective_to_the_smoke_step(tmp_path: Path) -> None:
    """roles/speculative_rollout/vars/main.yml under ansible: no objective, no argument
    (the mean); the sweep's, as the JSON the CLI reads."""
    play = tmp_path / "play.yml"
    out = tmp_path / "out.json"
    play.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(REPO / "roles/speculative_rollout/vars/main.yml")],
        "tasks": [{"ansible.builtin.copy": {
            "dest": str(out), "mode": "0600",
            "content": "{{ __speculative_rollout_objective_args | to_json }}"}}],
    }]))  # fmt: skip
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    args = {}
    for name, value in (("none", {}), ("set", LATENCY)):
        run = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c",
             "local", "-e", json.dumps({"speculative_rollout_objective": value}),
             "-e", f"ansible_python_interpreter={sys.executable}", str(play)],
            cwd=REPO, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        args[name] = json.loads(out.read_text())
    assert args["none"] == []
    flag, value = args["set"]
    assert (flag, json.loads(value)) == ("--objective-json", LATENCY)
