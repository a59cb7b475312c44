"""playbooks/sweep.yml's progress following, with real Ansible on localhost.

The sweep is an async job that numbers its progress lines in progress.log and ends
with a "done" line (``specops sweep run``); the play waits for each line with
``wait_for`` and prints it (playbooks/tasks/sweep-progress.yml). Here a stand-in job
writes such lines; the task file under test is the playbook's own. Also: ``sweep plan``
sizes the loop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from specops.cli import main
from specops_lab import network

REPO = Path(__file__).resolve().parents[2]


def _play(out: Path, script: str, lines: int) -> subprocess.CompletedProcess[str]:
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"sweep_out": str(out), "sweep_line_timeout": 2},
            "tasks": [
                {"name": "Start a stand-in sweep.",
                 "ansible.builtin.command": {"argv": ["bash", "-c", script]},
                 "async": 60, "poll": 0, "register": "_sweep_job"},
                {"name": "Follow it.",
                 "ansible.builtin.include_tasks": str(REPO / "playbooks/tasks/sweep-progress.yml"),
                 "loop": list(range(1, lines + 1)),
                 "loop_control": {"loop_var": "__sweep_line"},
                 "when": "not (__sweep_finished | default(false))"},
            ],
        }
    ]  # fmt: skip
    path = out / "play.yml"
    path.write_text(yaml.safe_dump(play), encoding="utf-8")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c",
         "local", "-e", f"ansible_python_interpreter={sys.executable}", str(path)],
        capture_output=True, text=True, check=False, cwd=out,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )  # fmt: skip


def test_each_progress_line_is_shown_as_the_sweep_writes_it(tmp_path: Path) -> None:
    log = tmp_path / "progress.log"
    script = (
        f'for i in 1 2 3; do sleep 0.5; echo "$i candidate $i of at most 3 run 1" >> {log};'
        f" done; sleep 0.5; echo 'done pick num_draft_tokens=5; restarts 3' >> {log}"
    )
    result = _play(tmp_path, script, lines=3 * 4 + 1)
    assert result.returncode == 0, result.stdout[-3000:]
    shown = [line.strip() for line in result.stdout.splitlines() if "msg:" in line]
    assert shown == [
        "msg: 1 candidate 1 of at most 3 run 1",
        "msg: 2 candidate 2 of at most 3 run 1",
        "msg: 3 candidate 3 of at most 3 run 1",
        "msg: done pick num_draft_tokens=5; restarts 3",
    ]


def test_a_sweep_that_dies_without_a_done_line_ends_the_following(tmp_path: Path) -> None:
    log = tmp_path / "progress.log"
    result = _play(tmp_path, f"echo '1 candidate 1 of at most 3 run 1' >> {log}; exit 3", lines=5)
    assert result.returncode == 0, result.stdout[-3000:]
    assert result.stdout.count("msg: 1 candidate 1") == 1
    # line 2 never came: one wait timed out, the job had ended, nothing more was awaited
    asked = result.stdout.split("Ask the sweep job whether it ended")[1:]
    # line 1 came (not asked); line 2 timed out (asked: ended); lines 3-5 not awaited
    assert [a.split("\n", 2)[1].split(":")[0] for a in asked] == ["skipping", "ok"] + [
        "skipping"
    ] * 3


def test_sweep_plan_sizes_the_following_loop(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "sweep.yml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "canary": "lab-ct801", "base_url": "http://127.0.0.1:18801",
                "base_profile": {"method": "ngram", "num_draft_tokens": 4},
                "space": {"num_draft_tokens": "2..9"},
                "objective": {"min_repeats": 3, "max_repeats": 5}, "max_candidates": 3,
            }
        )
    )  # fmt: skip
    assert main(["sweep", "plan", str(cfg), "--json"]) == 0
    # 3 candidates x max_repeats, no speculation x min_repeats, the done line
    planned = json.loads(capsys.readouterr().out)
    assert {k: planned[k] for k in ("mode", "candidates", "space", "max_progress_lines")} == {
        "mode": "ascent", "candidates": 3, "space": 8, "max_progress_lines": 3 * 5 + 3 + 1,
    }  # fmt: skip
    assert main(["sweep", "plan", str(cfg), "--mode", "grid", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_progress_lines"] == 8 * 5 + 3 + 1


def test_sweep_plan_of_a_config_without_base_url(tmp_path: Path, capsys) -> None:
    """sweep.yml lets a config leave base_url out (the canary's inventory address): the
    plan step gets the URL the play derives, as the run does; without one it says so."""
    cfg = tmp_path / "sweep.yml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "canary": "lab-ct801",
                "base_profile": {"method": "ngram", "num_draft_tokens": 4},
                "space": {"num_draft_tokens": "2..9"},
                "objective": {"min_repeats": 3, "max_repeats": 5}, "max_candidates": 3,
            }
        )
    )  # fmt: skip
    url = f"http://{network.load().address(33)}:8000"  # the lab container's; a plan dials nothing
    assert main(["sweep", "plan", str(cfg), "--base-url", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["candidates"] == 3
    assert main(["sweep", "plan", str(cfg)]) == 2
    assert "base_url: is required" in capsys.readouterr().err
