"""``specops doctor``: run the installed collection's ``specops.infra.verify`` through the
inventory and print the GPU doctor's summary table (or ``--json`` for cron and CI).

It runs ``ansible-playbook specops.infra.verify`` (the interpreter's own, else the one on
``PATH``) in the working directory, with the operator's environment: the ``ansible.cfg``
Ansible finds there (``ANSIBLE_CONFIG``, ``./ansible.cfg``, ...) and its inventory
unless ``-i`` names one, as the operator's own ``ansible-playbook`` would.

The playbook does all the work (evidence on the nodes and in the containers, the
diagnosis on the controller: the ``gpu_doctor`` role); this command reads its results
from Ansible's JSON callback and renders them with the same function the playbook's
table comes from. No second implementation. Exit 0 when every container is healthy (or
only has warnings), 1 when one is unhealthy, 2 when the run gave no diagnosis (bad
inventory, unreachable nodes: Ansible's messages are printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.diagnosis import (
    DIAGNOSIS_SCHEMA,
    render_table,
    summary,
)

from specops.errors import SpecopsError, ValidationError, input_file, syntax_problem
from specops.playbooks import ansible_tool

__all__ = ["PLAYBOOK", "register", "report_from_callback", "run_verify"]

PLAYBOOK = "specops.infra.verify"
REPORT_TASK = "Diagnose every container of this run from its evidence."


def run_verify(
    inventory: str | None, limit: str | None, extra_vars: list[str], playbook: str = PLAYBOOK
) -> tuple[int, dict[str, Any], str]:
    """``ansible-playbook specops.infra.verify`` (or ``playbook``: a name or a file) with
    the JSON callback, in the working directory: (rc, output, stderr)."""
    if inventory and "," not in inventory and not Path(inventory).exists():
        # a path Ansible would warn about and then run on localhost only
        raise ValidationError("--inventory", f"no such inventory file or directory: {inventory}")
    argv = [ansible_tool("ansible-playbook"), playbook]
    if inventory:
        argv += ["-i", inventory]
    if limit:
        argv += ["--limit", limit]
    for extra in extra_vars:
        argv += ["-e", extra]
    env = dict(os.environ)
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.json"
    env["ANSIBLE_NOCOLOR"] = "1"
    stdout, stderr, rc = _run_with_progress(argv, env, Path(playbook).name)
    try:
        out: dict[str, Any] = json.loads(stdout)
    except ValueError as exc:
        raise SpecopsError(
            f"ansible-playbook gave no JSON (exit {rc}): {(stdout + stderr).strip()[-800:]}"
        ) from exc
    return rc, out, stderr


# Seconds between the lines that say the doctor is still at work (its playbook's JSON
# callback prints nothing before the end: minutes on a fleet).
PROGRESS_EVERY = 30.0


def _run_with_progress(argv: list[str], env: dict[str, str], name: str) -> tuple[str, str, int]:
    """Run ``argv``; while it runs, one line on standard error every
    :data:`PROGRESS_EVERY` seconds (its elapsed time), so that a long run is not silent."""
    started = time.monotonic()
    with subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        while True:
            try:
                stdout, stderr = proc.communicate(timeout=PROGRESS_EVERY)
                break
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - started
                print(
                    f"specops doctor: {name} still running ({elapsed:.0f} s): evidence from"
                    " the nodes and containers, then the diagnosis",
                    file=sys.stderr, flush=True,
                )  # fmt: skip
    return stdout, stderr, proc.returncode


def _failures(callback: Mapping[str, Any]) -> list[str]:
    out = []
    for play in callback.get("plays", []):
        for task in play.get("tasks", []):
            for host, result in task.get("hosts", {}).items():
                if result.get("failed") or result.get("unreachable"):
                    if task["task"]["name"].endswith(
                        "Fail when a container's GPU path is unhealthy."
                    ):
                        continue
                    out.append(f"{host}: {task['task']['name']}: {result.get('msg', '')}")
    return out


def report_from_callback(callback: Mapping[str, Any]) -> dict[str, Any]:
    """The doctor's report out of ``verify.yml``'s JSON-callback output (or a report
    this command wrote with ``--json``)."""
    if "plays" not in callback:
        if callback.get("schema") == DIAGNOSIS_SCHEMA and "results" in callback:
            return dict(callback)
        raise SpecopsError("--from: neither ansible's JSON callback output nor a doctor report")
    diagnosis: Mapping[str, Any] | None = None
    for play in callback["plays"]:
        for task in play.get("tasks", []):
            if not task["task"]["name"].endswith(REPORT_TASK):
                continue
            for result in task.get("hosts", {}).values():
                if "results" in result:
                    diagnosis = result
    stats = {h: dict(s) for h, s in (callback.get("stats") or {}).items()}
    if diagnosis is None:
        problems = _failures(callback) or ["the diagnosis task did not run"]
        raise SpecopsError("verify.yml gave no diagnosis: " + "; ".join(problems))
    results = list(diagnosis["results"])
    counts = summary(results)
    return {
        "schema": DIAGNOSIS_SCHEMA,
        "healthy": counts["unhealthy"] == 0,
        "counts": counts,
        "results": results,
        "changed": sum(int(s.get("changed", 0)) for s in stats.values()),
        "stats": stats,
    }


def _doctor(args: argparse.Namespace) -> int:
    if args.from_file:
        try:
            data = json.loads(input_file(args.from_file, "--from").read_text())
        except OSError as exc:
            raise ValidationError(
                "--from", f"cannot read {args.from_file}: {exc.strerror}"
            ) from None
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise ValidationError(
                "--from", f"{args.from_file} is not JSON: {syntax_problem(exc)}"
            ) from None
        if not isinstance(data, dict):
            raise ValidationError("--from", f"{args.from_file} must hold a JSON object")
        try:
            report = report_from_callback(data)
        except (KeyError, TypeError, AttributeError) as exc:  # a shape no run writes
            raise ValidationError(
                "--from",
                f"{args.from_file} is neither ansible's JSON callback output nor a doctor"
                f" report ({type(exc).__name__}: {exc})",
            ) from None
    else:
        _rc, callback, _err = run_verify(args.inventory, args.limit, args.extra_vars, args.playbook)
        report = report_from_callback(callback)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        print("\n".join(render_table(report["results"])))
    return 0 if report["healthy"] else 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "doctor",
        help="diagnose serving containers' GPU path (runs specops.infra.verify, check-only)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-i", "--inventory", help="inventory (default: ansible.cfg's)")
    p.add_argument("-l", "--limit", help="limit the run; a container needs its node too (NODE,CT)")
    p.add_argument("-e", "--extra-vars", action="append", default=[], help="passed to Ansible")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--from",
        dest="from_file",
        help="read a saved run instead (ansible-playbook verify.yml with "
        "ANSIBLE_STDOUT_CALLBACK=ansible.builtin.json, or specops doctor --json)",
    )
    p.add_argument("--playbook", default=PLAYBOOK, help=argparse.SUPPRESS)
    p.set_defaults(func=_doctor)
