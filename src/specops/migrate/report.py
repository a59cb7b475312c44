"""The migration report: what changed (majors, minors, driver version, cards) and how
long each phase took, from the state file and the CT's config on the target now."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from specops.migrate.state import MigrationState

__all__ = ["PHASE_ORDER", "device_numbers", "render_markdown", "summarize"]

PHASE_ORDER = (
    "preflight",
    "target_host",
    "move",
    "recreate",
    "gpu_config",
    "userspace",
    "service",
    "readiness",
    "benchmark",
)
_ALLOW_RE = re.compile(r"devices\.allow:\s*c\s+(\d+|\*):(\d+|\*)")
_NODE_RE = re.compile(r"(/dev/nvidia[\w/-]*)")


def device_numbers(
    lines: Sequence[str], nodes: Mapping[str, tuple[int, int]] | None = None
) -> dict[str, Any]:
    """Majors and minors a CT's GPU lines name: raw allow lines give them directly;
    ``devN``/mount lines name nodes, resolved through the node's device list."""
    majors: set[str] = set()
    minors: set[str] = set()
    paths: list[str] = []
    for line in lines:
        m = _ALLOW_RE.search(line)
        if m:
            majors.add(m.group(1))
            minors.add(f"{m.group(1)}:{m.group(2)}")
            continue
        n = _NODE_RE.search(line)
        if n:
            path = n.group(1)
            paths.append(path)
            if nodes and path in nodes:
                maj, mnr = nodes[path]
                majors.add(str(maj))
                minors.add(f"{maj}:{mnr}")
    return {"majors": sorted(majors), "numbers": sorted(minors), "nodes": sorted(set(paths))}


def summarize(
    state: MigrationState, after_lines: Sequence[str], target_facts: Mapping[str, Any] | None
) -> dict[str, Any]:
    pre = state.phase("preflight")
    src_facts: Mapping[str, Any] = state.data.get("source_facts") or {}
    tgt_nodes = {
        d["path"]: (int(d["major"]), int(d["minor"]))
        for d in (target_facts or {}).get("device_nodes", [])
    }
    src_nodes = {
        d["path"]: (int(d["major"]), int(d["minor"])) for d in src_facts.get("device_nodes", [])
    }
    names = {str(g["address"]): str(g.get("name")) for g in (target_facts or {}).get("gpus", [])}
    before = device_numbers(pre.get("source_gpu_lines", []), src_nodes)
    after = device_numbers(after_lines, tgt_nodes)
    timings = {
        name: state.phases[name].get("seconds") for name in PHASE_ORDER if name in state.phases
    }
    for name, entry in state.phases.items():
        if name not in timings and "seconds" in entry:
            timings[name] = entry["seconds"]
    mode = next((c["message"] for c in pre.get("checks", []) if c.get("name") == "mode"), "")
    return {
        "vmid": state.vmid,
        "source": pre.get("source"),
        "target": pre.get("target"),
        # Source gone: how the CT came back (restore | recreate) and why; what could not
        # be carried over from the dead node.
        "recovery": pre.get("recovery", ""),
        "mode": mode or "normal: the source node was up, the CT was moved from it",
        "not_carried_over": [*pre.get("lost", []), *state.phase("move").get("lost", [])],
        "move": {k: state.phase("move").get(k) for k in ("action", "message", "notes", "upid")},
        "cards": {
            "before": state.data.get("source_cards", []),
            "after": [f"{a} {names[a]}" if a in names else a for a in pre.get("gpus", [])],
        },
        "driver": {
            "before": (src_facts.get("nvidia_module") or {}).get("version"),
            "after": ((target_facts or {}).get("nvidia_module") or {}).get("version"),
        },
        "uvm_major": {
            "before": src_facts.get("uvm_major"),
            "after": (target_facts or {}).get("uvm_major"),
        },
        "gpu_lines": {"before": pre.get("source_gpu_lines", []), "after": list(after_lines)},
        "majors": {"before": before["majors"], "after": after["majors"]},
        "device_numbers": {"before": before["numbers"], "after": after["numbers"]},
        "timings_s": timings,
        "total_s": round(sum(v for v in timings.values() if isinstance(v, (int, float))), 2),
    }


def render_markdown(summary: Mapping[str, Any]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, list | tuple):
            return ", ".join(str(v) for v in value) or "-"
        return "-" if value is None else str(value)

    def pair(key: str) -> str:
        value = summary[key]
        return f"| {key} | {cell(value['before'])} | {cell(value['after'])} |"

    lines = [
        f"# Migration of CT {summary['vmid']}: {summary['source']} -> {summary['target']}",
        "",
        f"Move: {summary['move'].get('message')}",
        "",
        f"Mode: {summary.get('mode', '-')}",
        "",
        "Not carried over:"
        + (
            "".join(f"\n- {item}" for item in summary.get("not_carried_over", []))
            or " nothing (the source node was up)"
        ),
        "",
        "| what | before | after |",
        "|---|---|---|",
        pair("cards"),
        pair("driver"),
        pair("uvm_major"),
        pair("majors"),
        pair("device_numbers"),
        "",
        "| phase | seconds |",
        "|---|---|",
        *[f"| {name} | {secs} |" for name, secs in summary["timings_s"].items()],
        f"| total | {summary['total_s']} |",
        "",
    ]
    return "\n".join(lines)
