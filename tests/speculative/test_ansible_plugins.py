"""The filter and the drafter_preflight module, run by real ansible-playbook."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PLAYBOOK = """
- name: Exercise the speculative filters and the drafter preflight module.
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Render vLLM flags for a dflash profile.
      ansible.builtin.set_fact:
        _argv: "{{ (prof | specops.infra.speculative_launch('vllm', '0.32.0')).argv }}"
      vars:
        prof: {method: dflash, draft_model: /m/d, num_draft_tokens: 16}
    - name: Reject a profile that SGLang 0.5.11 cannot serve.
      ansible.builtin.set_fact:
        _bad: "{{ prof | specops.infra.speculative_launch('sglang', '0.5.11', name='svc_spec') }}"
      vars:
        prof: {method: ddtree, draft_model: /m/d, tree_budget: 8}
      register: _reject
      ignore_errors: true
    - name: Check the seeds' drafter.
      specops.infra.drafter_preflight:
        target_dir: "{{ fx }}/qwen3_6-27b-target"
        drafter_dir: "{{ fx }}/qwen3_6-27b-dflash"
        window: 2048
        num_draft_tokens: 16
      register: _good
    - name: Check the corrupted drafter (check mode too).
      specops.infra.drafter_preflight:
        target_dir: "{{ fx }}/qwen3_6-27b-target"
        drafter_dir: "{{ fx }}/qwen3_6-27b-dflash-corrupted"
        window: 2048
      check_mode: true
      register: _bad_drafter
      ignore_errors: true
    - name: Write what happened.
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'argv': _argv, 'reject': _reject.msg, 'good': _good,
                      'bad': _bad_drafter} | to_json }}"
        mode: "0644"
"""


@pytest.mark.slow
def test_filter_and_module_in_a_real_playbook(
    tmp_path: Path, repo_root: Path, drafter_fixtures: Path
) -> None:
    playbook = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent))
    assert playbook, f"ansible-playbook is missing beside {sys.executable} (scripts/setup.sh venv)"
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    out = tmp_path / "out.json"
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(repo_root / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(repo_root / "collections"),
        "PYTHONPATH": str(repo_root / "src"),
        "ANSIBLE_FACT_CACHING": "memory",
    }
    result = subprocess.run(
        [playbook, "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml"),
         "-e", f"fx={drafter_fixtures}", "-e", f"out={out}",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["argv"] == [
        "--speculative-config", '{"method":"dflash","model":"/m/d","num_speculative_tokens":15}'
    ]  # fmt: skip
    assert "svc_spec.method: sglang 0.5.11 cannot do 'ddtree'" in data["reject"]
    assert data["good"]["findings"] == []
    assert data["good"]["changed"] is False
    bad = data["bad"]
    assert bad["failed"] is True
    assert [f["field"] for f in bad["findings"]] == [
        "drafter.dflash_config.mask_token_id",
        "drafter.dflash_config.target_layer_ids[4]",
        "drafter.layer_types",
    ]
    assert bad["msg"].startswith(
        "DFlash drafter preflight: drafter.dflash_config.mask_token_id: found 248320,"
    )
