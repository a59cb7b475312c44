"""The README's first command, end to end, from a clean lab (issue 10).

`scripts/lab.sh` sets the machine up, brings the lab up and runs deploy.yml against
inventory/lab: the container is created through the API stand-in, gets a card of its
node and the node's NVIDIA userspace, the real vLLM CPU build serves the tiny model with
an ngram profile under systemd, and the smoke benchmark writes its report. A second run
changes nothing (P3: its time against the first's), and `--check --diff` on the
converged lab reports no change. The lab's containers are destroyed before and after.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from specops.lab.pve.layout import Cluster
from specops.lab.pve.testing import open_devices_in_ct

pytestmark = [pytest.mark.lxc, pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CT = "lab-ct801"
LXC_NAME = "pve-b-801"
PORT = 18801
_RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Run:
    rc: int
    output: str
    seconds: float

    def recap(self) -> dict[str, dict[str, int]]:
        """Per host, the counts summed over the recaps of all imported playbooks."""
        totals: dict[str, dict[str, int]] = {}
        for m in _RECAP.finditer(self.output):
            host = totals.setdefault(
                m["host"], dict.fromkeys(("changed", "failed", "unreachable"), 0)
            )
            for key in host:
                host[key] += int(m[key])
        return totals


def _lab(*args: str) -> Run:
    start = time.monotonic()
    proc = subprocess.run(
        ["scripts/lab.sh", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)


def _deploy_seconds(run: Run) -> float:
    m = re.search(r"^lab: deploy\.yml finished in (\d+) s$", run.output, re.MULTILINE)
    assert m, run.output[-3000:]
    return float(m[1])


def _destroy_lab() -> None:
    subprocess.run(
        [str(REPO / ".venv/bin/specops"), "lab", "down", "--destroy"], check=False, timeout=300
    )


@pytest.fixture(scope="module")
def first_run() -> Iterator[Run]:
    _destroy_lab()
    run = _lab()
    yield run
    _destroy_lab()


@pytest.fixture(scope="module")
def second_run(first_run: Run) -> Run:
    assert first_run.rc == 0, "the first run failed; see its test"
    return _lab()


@pytest.fixture(scope="module")
def check_run(second_run: Run) -> Run:
    return _lab("--check", "--diff")


def test_first_run_deploys_and_reports(first_run: Run) -> None:
    assert first_run.rc == 0, first_run.output[-6000:]
    recap = first_run.recap()
    assert set(recap) >= {"localhost", "pve-a", "pve-b", CT}, recap
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in recap.values()), recap
    assert recap[CT]["changed"] > 0
    # The callback folds long messages at spaces: match across line breaks.
    report_m = re.search(r"report\s+(\S+/report\.md)", first_run.output)
    plot_m = re.search(r"plots\s+(\S+\.png)", first_run.output)
    results_m = re.search(r"results\s+(\S+/results\.json)", first_run.output)
    assert report_m, "the benchmark play names its report"
    assert plot_m, "the benchmark play names its plots"
    assert results_m, "the benchmark play names its results"
    report = Path(report_m[1])
    assert "tok/s" in report.read_text()
    assert Path(plot_m[1]).parent == report.parent
    assert Path(plot_m[1]).stat().st_size > 0
    results = json.loads(Path(results_m[1]).read_text())
    cells = results["cells"]
    assert [(c["concurrency"], c["context_tokens"]) for c in cells] == [(1, 128), (2, 128)]
    assert all(c["status"] == "ok" and c["records"] for c in cells), "every cell measured"


def test_container_has_its_gpu_userspace_and_server(first_run: Run) -> None:
    assert first_run.rc == 0
    attach = ["lxc-attach", "-n", LXC_NAME, "--"]
    node = Cluster.load(Path("/var/lib/specops/lab/cluster")).node("pve-b")
    text = node.ct_conf(801).read_text()
    assert re.search(r"^dev\d+: /dev/nvidia0\b", text, re.MULTILINE), text
    # The device cgroup lets the container open its card, nvidiactl and uvm; ENXIO:
    # this machine has no NVIDIA module behind the nodes (EPERM if the cgroup denied it).
    assert open_devices_in_ct(node, 801, "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm") == {
        "/dev/nvidia0": "ENXIO",
        "/dev/nvidiactl": "ENXIO",
        "/dev/nvidia-uvm": "ENXIO",
    }
    smi = subprocess.run(
        [*attach, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert smi.stdout.split()[0] == "580.126.09", "userspace = pve-b's kernel module"
    active = subprocess.run(
        [*attach, "systemctl", "is-active", "specops-tiny-qwen.service"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert active.stdout.strip() == "active", active.stdout + active.stderr
    reply = httpx.post(
        f"http://127.0.0.1:{PORT}/v1/completions",
        json={"model": "tiny-qwen", "prompt": "def add(a, b):", "max_tokens": 8},
        timeout=120,
    )
    assert reply.status_code == 200
    assert reply.json()["usage"]["completion_tokens"] > 0


def test_second_run_changes_nothing(
    first_run: Run, second_run: Run, request: pytest.FixtureRequest
) -> None:
    assert second_run.rc == 0, second_run.output[-6000:]
    recap = second_run.recap()
    assert {h: r["changed"] for h, r in recap.items() if r["changed"]} == {}, recap
    first, again = _deploy_seconds(first_run), _deploy_seconds(second_run)
    line = (
        f"P3 deploy.yml: first run {first:.0f} s, no-change run {again:.0f} s, "
        f"ratio {again / first:.0%} (target <= 25 %)"
    )
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    out = REPO / "results" / "lab-deploy-p3.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"first_s": first, "rerun_s": again, "ratio": again / first}) + "\n")


def test_check_diff_on_converged_lab_reports_no_change(check_run: Run) -> None:
    assert check_run.rc == 0, check_run.output[-6000:]
    recap = check_run.recap()
    assert {h: r["changed"] for h, r in recap.items() if r["changed"]} == {}, recap
