"""The gpu_facts Ansible module, run as Ansible runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
MODULE = REPO / "collections/ansible_collections/specops/infra/plugins/modules/gpu_facts.py"


def run_module(args: dict, tmp_path: Path) -> tuple[int, dict]:
    argsfile = tmp_path / "args.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'collections'}:{os.environ.get('PYTHONPATH', '')}")
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(argsfile)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_module_returns_the_facts(host_tree, tmp_path: Path) -> None:
    root = host_tree("a6000-3090")
    rc, out = run_module({"root": str(root), "_ansible_check_mode": True}, tmp_path)
    assert rc == 0, out
    assert out["changed"] is False
    facts = out["ansible_facts"]["specops_gpu"]
    assert facts["schema_version"] == 1
    assert [g["free"] for g in facts["gpus"]] == [True, True, False, False]
    assert facts["gpus"][2]["held_by_running_vm"] == 201


def test_module_running_vmids_overrides_pidfiles(host_tree, tmp_path: Path) -> None:
    root = host_tree("a6000-3090")
    rc, out = run_module({"root": str(root), "running_vmids": [203]}, tmp_path)
    assert rc == 0, out
    gpus = out["ansible_facts"]["specops_gpu"]["gpus"]
    assert [g["held_by_running_vm"] for g in gpus] == [None, 203, 201, 201]
    # 201 and 202 count as stopped for their hostpci entries, but their QEMUs (pids in
    # valid pidfiles) have IOMMU group 30 of both 3090s open: in use all the same.
    assert [h["running"] for g in gpus[2:] for h in g["holders"]] == [False, False]
    assert [g["free"] for g in gpus] == [True, False, False, False]


def test_module_fails_on_malformed_hostpci(tmp_path: Path) -> None:
    qemu = tmp_path / "root/etc/pve/qemu-server"
    qemu.mkdir(parents=True)
    (qemu / "110.conf").write_text("name: x\nhostpci0: host=gpu0\n")
    rc, out = run_module({"root": str(tmp_path / "root")}, tmp_path)
    assert rc == 1
    assert out["failed"] is True
    assert out["msg"].startswith(f"{qemu / '110.conf'}:2: hostpci0: not a PCI address")


def test_ansible_runs_it_in_check_mode(host_tree, tmp_path: Path) -> None:
    root = host_tree("pro6000x4")
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_HOME=str(tmp_path / "home"),
    )
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "--check",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-m",
            "specops.infra.gpu_facts",
            "-a",
            f"root={root}",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    facts = result["ansible_facts"]["specops_gpu"]
    assert facts["uvm_major"] == 511
    assert len(facts["gpus"]) == 4
    assert result["changed"] is False
