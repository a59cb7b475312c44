"""The fleet lab's inventory passes the preflight every playbook runs first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specops.errors import ValidationError
from specops_lab.tune_nodes import MODELS_MOUNT, LabNode, write_inventory
from specops_lab.vllm_install import lab_paths

REPO = Path(__file__).resolve().parents[2]
NGRAM = {"method": "ngram", "num_draft_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}


def test_fleet_inventory_passes_preflight(tmp_path: Path) -> None:
    nodes = [LabNode(f"specops-tune-node{i}", 18710 + i) for i in (1, 2, 3)]
    inventory = write_inventory(nodes, tmp_path / "hosts.json", NGRAM)
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         str(REPO / "playbooks/preflight.yml")],
        cwd=REPO, env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:]
    assert "failed=0" in run.stdout


def test_fleet_inventory_serves_a_model_of_the_lab_cache(tmp_path: Path) -> None:
    """The nodes mount the lab's model cache: another model there (the CI oracle) is served
    from its path under the mount; one outside the cache is refused by name."""
    nodes = [LabNode("specops-tune-node1", 18711)]
    oracle = lab_paths().models / "oracle-mimo-cpu-0123" / "target"
    inventory = write_inventory(nodes, tmp_path / "hosts.json", NGRAM, model=oracle)
    serving = json.loads(inventory.read_text())["all"]["children"]["serving"]["vars"]
    assert serving["lab_model_source"] == f"{MODELS_MOUNT}/oracle-mimo-cpu-0123/target"
    with pytest.raises(ValidationError, match="is not under the lab's model cache"):
        write_inventory(nodes, tmp_path / "other.json", NGRAM, model=tmp_path)
