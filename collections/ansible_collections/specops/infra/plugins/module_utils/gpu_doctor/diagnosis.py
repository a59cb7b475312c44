"""The GPU doctor's diagnosis: evidence of a container's GPU path in, findings out.

:func:`diagnose` is pure: it reads the node's and the container's evidence
(:mod:`gpu_doctor.evidence`) and what the inventory wants (:class:`Expectation`), and
returns a :class:`Diagnosis` whose findings each say the cause in one line and the fix
(the variable or playbook that corrects it). Symptoms that a cause explains (an
``EPERM``, NVML's "Unknown Error", a failed ``cuInit``) are listed as that finding's
evidence, not as findings of their own. A finding about a card's node names the card
(``/dev/nvidia3 (card 0000:61:00.0)``), and :attr:`Diagnosis.cards` has a row per card
of the container (``ok`` or the codes of the findings that name it): a multi-card
container's report says which of its cards is wrong. :func:`render_table` prints the summary table
that ``playbooks/verify.yml`` ends with and ``specops doctor`` prints.

Findings (``code``: what it means):

- ``no_node_evidence``: the node gave nothing (unreachable, or left out by ``--limit``);
- ``no_conf``: the container's conf is not on its node;
- ``container_stopped`` / ``container_unreachable``: no evidence from inside;
- ``host_driver`` / ``uvm_not_loaded``: the node's nvidia / nvidia-uvm module is not loaded;
- ``card_on_vfio`` / ``card_held_by_vm`` / ``card_missing``: a card the inventory wants
  is bound to vfio-pci (or no driver), held by a running VM, or not on the node;
- ``minor_mismatch``: the conf gives ``/dev/nvidiaN`` and no card has Device Minor N,
  or a wanted card's Device Minor is not given;
- ``card_not_given``: the conf gives fewer cards than ``lxc_gpu_passthrough_gpu_count``
  (the cards of the model on the node without a node in the conf are named);
- ``stale_uvm_major``: the conf allows nvidia-uvm under another host's major;
- ``not_allowed``: a node is (or would be) in the container but the device cgroup
  denies it;
- ``allowed_missing``: allowed (or given) but not in the container;
- ``wrong_cgroup_key``: allowed only by the other cgroup version's key;
- ``restart_pending``: the conf allows a node the running container still denies;
- ``stale_node``: a node in the container has other numbers than the node's;
- ``no_driver_answer``: a node opens with ENXIO/ENODEV (no driver behind it);
- ``no_userspace`` / ``userspace_mismatch`` / ``userspace_leftover``;
- ``nvml_failed`` / ``cuda_failed`` / ``cuda_runtime``: unexplained by the above;
- ``server_down``: the server does not answer the readiness probe;
- ``router_down`` / ``router_missing`` / ``router_drained`` / ``router_unreachable``: what
  the router in front of the container says of it (:mod:`gpu_doctor.router`).

Stdlib only (it is imported by the ``gpu_doctor`` module and by ``specops doctor``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.checks import (
    Ctx,
    Expectation,
    Finding,
    card_checks,
    card_rows,
    checks_summary,
    device_checks,
    given_paths,
    host_checks,
    minor_checks,
    nvml_cuda_checks,
    server_checks,
    userspace_checks,
)
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.router import (
    router_checks,
    router_column,
)

__all__ = [
    "DIAGNOSIS_SCHEMA",
    "Diagnosis",
    "Expectation",
    "Finding",
    "build_text",
    "diagnose",
    "render_table",
    "summary",
]

DIAGNOSIS_SCHEMA = 1


@dataclass(frozen=True)
class Diagnosis:
    container: str
    node: str | None
    vmid: int | None
    status: str  # healthy | warning | unhealthy
    findings: tuple[Finding, ...]
    checks: dict[str, str] = field(default_factory=dict)
    # The engine build the container's unit runs ("" when none is stamped): engine and
    # version, or git ref and commit with the pull requests applied on it, in order.
    build: str = ""
    # One row per card (address, path, state: ok or the codes of the findings naming
    # its node); empty for a CPU-only container or when the conf could not be read.
    cards: tuple[dict[str, str], ...] = ()

    @property
    def healthy(self) -> bool:
        return self.status != "unhealthy"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["schema"] = DIAGNOSIS_SCHEMA
        return out


# --------------------------------------------------------------------------- entry


def diagnose(
    name: str,
    node_ev: Mapping[str, Any],
    ct_ev: Mapping[str, Any] | None,
    expect: Expectation | None = None,
    *,
    simulated_hardware: bool = False,
    routers: Sequence[Mapping[str, Any]] = (),
) -> Diagnosis:
    """Findings for container ``name`` from its node's and its own evidence.

    ``ct_ev`` None: nothing came from inside (stopped or unreachable).
    ``simulated_hardware``: the lab's hardware stand-in (no driver behind the device
    nodes: an allowed node opens with ENXIO where a real one opens). ``routers``: the
    routers' views of the container (:func:`gpu_doctor.router.router_views`).
    """
    expect = expect or Expectation()
    host = node_ev.get("host") or {}
    node = str(host.get("node") or "the node")
    vmid = node_ev.get("vmid")
    conf = node_ev.get("conf")
    reachable = bool(ct_ev and ct_ev.get("reachable", True))
    c = Ctx(name, node, vmid, host, conf or {}, ct_ev if reachable else None, simulated_hardware)
    if node_ev.get("missing"):
        c.add(
            Finding(
                "no_node_evidence",
                "no evidence from the node",
                str(node_ev["missing"]),
                f"run the node with its containers: --limit {node},{name}",
            )
        )
        return _finish(c, [])
    if conf is None:
        c.add(
            Finding(
                "no_conf",
                "container not on the node",
                f"/etc/pve/lxc/{vmid}.conf does not exist on {node}",
                f"pve_container_node / pve_container_vmid of {name}, or create it: "
                f"playbooks/container.yml --limit {name}",
            )
        )
        return _finish(c, [])
    if node_ev.get("running") is False:
        c.add(
            Finding(
                "container_stopped",
                "container stopped",
                f"CT {vmid} is not running on {node}: nothing inside could be checked",
                f"pct start {vmid} on {node} (or playbooks/container.yml --limit {name})",
            )
        )
    elif not reachable:
        c.add(
            Finding(
                "container_unreachable",
                "container unreachable",
                f"no evidence from inside CT {vmid}: "
                f"{(ct_ev or {}).get('error') or 'Ansible could not reach it'}",
                f"the connection variables of {name} (ansible_host, ansible_connection)",
            )
        )
    required = list(node_ev.get("paths") or [])
    if not expect.gpu:
        server_checks(c)
        router_checks(c, routers)
        return _finish(c, [], routers)
    c.expect = expect
    driver = host_checks(c)
    card_checks(c, expect)
    if driver:
        given = given_paths(c.conf)
        if not given and not c.conf.get("allow") and not c.conf.get("devs"):
            c.add(
                Finding(
                    "allowed_missing",
                    "no GPU lines",
                    f"/etc/pve/lxc/{vmid}.conf gives no NVIDIA device",
                    f"lxc_gpu_passthrough_gpu_model / lxc_gpu_passthrough_gpus of {name}, "
                    f"then playbooks/container.yml --limit {node},{name}{c.until_ready}",
                ),
                explains=("nvml", "cuda"),
            )
        else:
            minor_checks(c, expect, given)
            device_checks(c, given, required)
    userspace_checks(c, expect)
    nvml_cuda_checks(c)
    server_checks(c)
    router_checks(c, routers)
    return _finish(c, required, routers)


def build_text(build: Mapping[str, Any] | None) -> str:
    """One line for an engine build (:func:`gpu_doctor.evidence.build_evidence`)."""
    if not build or not build.get("engine"):
        return ""
    if not build.get("git_commit"):
        return f"{build['engine']} {build.get('version', '')}".strip()
    parts = [f"{build.get('git_ref') or 'git'} ({str(build['git_commit'])[:12]})"]
    for patch in build.get("git_patches") or []:
        ref, _at, commit = str(patch).rpartition("@")
        parts.append(f"{ref} ({commit[:12]})")
    return f"{build['engine']} git " + " + ".join(parts)


def _finish(
    c: Ctx, required: Sequence[str], routers: Sequence[Mapping[str, Any]] = ()
) -> Diagnosis:
    errors = [f for f in c.findings if f.severity == "error"]
    status = "unhealthy" if errors else ("warning" if c.findings else "healthy")
    return Diagnosis(
        container=c.name,
        node=c.node,
        vmid=c.vmid,
        status=status,
        findings=tuple(c.findings),
        checks={**checks_summary(c, required), "router": router_column(routers)},
        build=build_text((c.ct or {}).get("build")),
        cards=tuple(card_rows(c, c.expect, required)) if c.expect is not None else (),
    )


# --------------------------------------------------------------------------- output


_COLUMNS = (
    ("container", "container"),
    ("node", "node"),
    ("ct", "CT"),
    ("devices", "devices"),
    ("nvidia_smi", "nvidia-smi"),
    ("cuda", "CUDA"),
    ("userspace", "userspace"),
    ("server", "server"),
    ("router", "router"),
    ("result", "result"),
)


def summary(diagnoses: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Counts by status (from :meth:`Diagnosis.to_dict` results)."""
    out = {"healthy": 0, "warning": 0, "unhealthy": 0}
    for d in diagnoses:
        out[str(d["status"])] = out.get(str(d["status"]), 0) + 1
    return out


def render_table(diagnoses: Sequence[Mapping[str, Any]]) -> list[str]:
    """The summary table (Markdown) and one line per finding, from ``to_dict`` results."""
    rows = []
    for d in diagnoses:
        checks = d.get("checks") or {}
        titles = [f["title"] for f in d.get("findings", [])]
        result = d["status"] if not titles else f"{d['status']}: {'; '.join(titles)}"
        rows.append(
            {
                "container": str(d["container"]),
                "node": str(d.get("node") or "-"),
                "ct": str(d.get("vmid") or "-"),
                "devices": checks.get("devices", "-"),
                "nvidia_smi": checks.get("nvidia_smi", "-"),
                "cuda": checks.get("cuda", "-"),
                "userspace": checks.get("userspace", "-"),
                "server": checks.get("server", "-"),
                "router": checks.get("router", "-"),
                "result": result,
            }
        )
    lines = [
        "| " + " | ".join(title for _key, title in _COLUMNS) + " |",
        "|" + "---|" * len(_COLUMNS),
    ]
    lines += ["| " + " | ".join(row[key] for key, _t in _COLUMNS) + " |" for row in rows]
    for d in diagnoses:
        for f in d.get("findings", []):
            head = f"- {d['container']} [{f['severity']}] {f['title']}"
            lines.append(f"{head}: {f['cause']} -> fix: {f['fix']}")
    lines += [f"- {d['container']} build: {d['build']}" for d in diagnoses if d.get("build")]
    lines += [
        f"- {d['container']} cards: "
        + "; ".join(f"{r['address']} {r['path']} {r['state']}" for r in d["cards"])
        for d in diagnoses
        if len(d.get("cards") or ()) > 1
    ]
    counts = summary(diagnoses)
    lines.append(
        f"{len(diagnoses)} container(s): {counts['healthy']} healthy, {counts['warning']} "
        f"warning, {counts['unhealthy']} unhealthy"
    )
    return lines
