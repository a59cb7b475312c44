"""The fleet lab's inventory passes the preflight every playbook runs first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from specops_lab.tune_nodes import LabNode, write_inventory

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
