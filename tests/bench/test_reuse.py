"""`bench run --reuse`: a recorded run stands only for the same plan against the same
server process (specops.bench.reuse), against the synthetic server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specops.bench.plan import plan_from_mapping
from specops.bench.results import Results, load_results
from specops.bench.reuse import MAX_RUNS_READ, find_standing
from specops.cli import main

REPO = Path(__file__).resolve().parents[2]


def _run(capsys: pytest.CaptureFixture[str], url: str, out: Path, *extra: str) -> dict:
    args = ["bench", "run", "--base-url", url, "--concurrency", "1,2", "--context-lengths",
            "64", "--output-len", "8", "--requests-per-cell", "2", "--warmup-per-cell", "0",
            "--out", str(out), "--json", *extra]  # fmt: skip
    code = main(args)
    info = json.loads(capsys.readouterr().out.strip())
    info["exit"] = code
    return info


def test_a_rerun_against_the_same_server_process_measures_nothing(
    synthetic, tmp_path: Path, capsys
) -> None:
    server = synthetic(tokens_per_chunk=2)
    first = _run(capsys, server.url, tmp_path, "--server-instance", "inv-1", "--reuse")
    assert first["exit"] == 0
    assert first["reused"] is False
    assert first["not_reused"] == f"no finished run under {tmp_path}"
    assert load_results(first["results"]).server_instance == "inv-1"
    sent = server.requests
    again = _run(capsys, server.url, tmp_path, "--server-instance", "inv-1", "--reuse")
    assert again["exit"] == 0
    assert again["reused"] is True
    assert (again["run_id"], again["results"], again["report"]) == (
        first["run_id"], first["results"], first["report"],
    )  # fmt: skip
    assert again["plots"] == first["plots"]
    assert again["plots"]
    assert server.requests == sent, "a standing run sends nothing to the server"
    assert len([d for d in tmp_path.iterdir() if d.is_dir()]) == 1


def test_a_standing_run_without_its_report_gets_it_written_not_measured(
    synthetic, tmp_path: Path, capsys
) -> None:
    """A run whose results finished but whose report did not (killed or failed while
    writing it; found by the consumer deploy, issue 33): a reuse writes the report from
    the recorded results and sends nothing to the server."""
    server = synthetic(tokens_per_chunk=2)
    first = _run(capsys, server.url, tmp_path, "--server-instance", "inv-1", "--reuse")
    report = Path(first["report"])
    text = report.read_text()
    report.unlink()
    sent = server.requests
    again = _run(capsys, server.url, tmp_path, "--server-instance", "inv-1", "--reuse")
    assert again["reused"] is True
    assert again["report"] == str(report)
    assert report.read_text() == text
    assert server.requests == sent
    assert not list(tmp_path.rglob(".report.md.partial"))


def test_a_restarted_server_or_another_plan_is_measured_again(
    synthetic, tmp_path: Path, capsys
) -> None:
    server = synthetic(tokens_per_chunk=2)
    first = _run(capsys, server.url, tmp_path, "--server-instance", "inv-1", "--reuse")
    restarted = _run(capsys, server.url, tmp_path, "--server-instance", "inv-2", "--reuse")
    assert restarted["reused"] is False
    assert restarted["not_reused"] == (
        f"{first['run_id']} measured server instance inv-1, not inv-2"
    )
    other = _run(
        capsys, server.url, tmp_path, "--server-instance", "inv-2", "--reuse", "--seed", "7"
    )
    assert other["reused"] is False
    assert other["not_reused"] == f"{restarted['run_id']} measured another plan (changed: seed)"
    # Without --reuse a run always measures, and records the instance it was given.
    plain = _run(capsys, server.url, tmp_path, "--server-instance", "inv-2", "--seed", "7")
    assert "reused" in plain
    assert plain["reused"] is False
    assert plain["run_id"] != other["run_id"]
    # The newest of the runs that measured this plan on this process stands.
    again = _run(
        capsys, server.url, tmp_path, "--server-instance", "inv-2", "--reuse", "--seed", "7"
    )
    assert again["reused"] is True
    assert again["run_id"] == plain["run_id"]


def test_a_run_with_failures_or_without_an_instance_never_stands(
    synthetic, tmp_path: Path, capsys
) -> None:
    broken = synthetic(status=500)
    failed = _run(capsys, broken.url, tmp_path / "a", "--server-instance", "inv-1", "--reuse")
    assert failed["exit"] == 1
    assert failed["failed_cells"]
    retry = _run(capsys, broken.url, tmp_path / "a", "--server-instance", "inv-1", "--reuse")
    assert retry["reused"] is False
    assert retry["not_reused"] == f"{failed['run_id']} has 2 cell(s) with failures"

    server = synthetic(tokens_per_chunk=2)
    unnamed = _run(capsys, server.url, tmp_path / "b")
    assert load_results(unnamed["results"]).server_instance is None
    named = _run(capsys, server.url, tmp_path / "b", "--server-instance", "inv-1", "--reuse")
    assert named["reused"] is False
    assert named["not_reused"] == (
        f"{unnamed['run_id']} measured server instance none recorded, not inv-1"
    )


def test_reuse_needs_an_instance_and_no_resume(synthetic, tmp_path: Path, capsys) -> None:
    server = synthetic()
    args = ["bench", "run", "--base-url", server.url, "--out", str(tmp_path), "--reuse"]
    assert main(args) == 2
    assert "--server-instance: is required with --reuse" in capsys.readouterr().err
    assert main(["bench", "run", "--resume", str(tmp_path), "--reuse"]) == 2
    assert "--reuse: cannot be combined with --resume" in capsys.readouterr().err
    assert server.requests == 0


def test_results_without_an_instance_still_load(synthetic, tmp_path: Path, capsys) -> None:
    """Files written before the field existed read it as None (the documented default)."""
    server = synthetic(tokens_per_chunk=2)
    info = _run(capsys, server.url, tmp_path)
    path = Path(info["results"])
    data = json.loads(path.read_text())
    del data["server_instance"]
    assert Results.from_dict(data).server_instance is None


def test_only_the_newest_runs_are_read(synthetic, tmp_path: Path, capsys) -> None:
    server = synthetic(tokens_per_chunk=2)
    first = _run(capsys, server.url, tmp_path, "--server-instance", "inv-1")
    for n in range(MAX_RUNS_READ):  # newer run directories that are not runs at all
        (tmp_path / f"99999999T{n:06d}Z-junk").mkdir()
    plan_file = Path(first["results"]).parent / "run.json"
    plan = json.loads(plan_file.read_text())["plan"]
    standing = find_standing(tmp_path, plan_from_mapping(plan), "inv-1")
    assert standing.store is None
    assert standing.reason == f"no finished run under {tmp_path}"


def _role_play(tmp_path: Path, url: str, extra: dict) -> tuple[str, dict]:
    """roles/benchmark for real (Ansible on localhost, the synthetic server), its
    messages and the benchmark_result fact."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    fact = tmp_path / "result.json"
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {
        "benchmark_base_url": url,
        "benchmark_results_dir": str(tmp_path / "results"),
        "benchmark_plan": {"concurrency": [1], "context_lengths": [64], "output_len": 8,
                           "requests_per_cell": 2, "warmup_per_cell": 0},
        "inference_engine_model": str(model),
    }, "roles": ["benchmark"], "post_tasks": [
        {"ansible.builtin.copy": {"content": "{{ benchmark_result | to_json }}",
                                  "dest": str(fact), "mode": "0600"},
         "changed_when": False},  # the test's own read-out, not the role's
    ]}]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", json.dumps(extra),
         str(tmp_path / "play.yml")],
        capture_output=True, text=True, check=False, cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert re.search(r"localhost\s+:\s+ok=\d+\s+changed=0\s", proc.stdout), proc.stdout[-1500:]
    return " ".join(proc.stdout.split()), json.loads(fact.read_text())


def test_the_benchmark_role_reuses_only_for_the_process_this_run_read(
    synthetic, tmp_path: Path
) -> None:
    """What deploy.yml's re-run does: the service step's InvocationID decides."""
    server = synthetic(tokens_per_chunk=2)
    same = {"inference_service_result": {"after": {"invocation_id": "inv-1"}}}
    out, first = _role_play(tmp_path, server.url, same)
    assert first["reused"] is False
    assert "measured (no finished run under" in out
    sent = server.requests
    out, again = _role_play(tmp_path, server.url, same)
    assert again["reused"] is True
    assert again["results"] == first["results"]
    assert "measured nothing: these results stand (same plan, same server process inv-1;" in out
    assert server.requests == sent
    restarted = {"inference_service_result": {"after": {"invocation_id": "inv-2"}}}
    out, third = _role_play(tmp_path, server.url, restarted)
    assert third["reused"] is False
    assert f"measured ({first['run_id']} measured server instance inv-1, not inv-2)" in out
    # No service step in this run (playbooks/benchmark.yml alone): always measured.
    out, alone = _role_play(tmp_path, server.url, {})
    assert "reused" in alone
    assert alone["reused"] is False
    assert alone["run_id"] not in {first["run_id"], third["run_id"]}
    assert load_results(alone["results"]).server_instance is None
    out, off = _role_play(tmp_path, server.url, {**restarted, "benchmark_reuse": False})
    assert off["reused"] is False
    assert off["run_id"] != third["run_id"]
