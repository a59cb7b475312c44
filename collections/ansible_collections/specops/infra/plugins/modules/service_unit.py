#!/usr/bin/python
"""Ansible module: write an inference unit and make its server run it, ready, in one step."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: service_unit
short_description: Put an inference server's unit in place, restart it once, gate on readiness
description:
  - Compares the unit file at I(path) with I(content). When they differ, keeps the old
    text at C(<path>.previous), writes the new one atomically (root, 0644) and reloads
    systemd.
  - Secrets never go into the unit (systemd shows every C(Environment=) to any local
    user over D-Bus, and the unit text comes back in the result); I(secret_environment)
    is written to I(environment_file) (root, 0600) for the unit's C(EnvironmentFile=),
    and a unit text whose C(Environment=) sets a secret-looking name (C(*TOKEN*),
    C(*SECRET*), C(*PASSWORD*), C(*API_KEY*), ...) is refused before anything changes.
  - Restarts the service only when the text changed, it is not running, its main process
    started before the unit (or I(environment_file)) was last written (a run stopped
    between the write and the restart, C(stale)), or I(restart) is true, with a graceful stop (its processes and, where C(nvidia-smi) exists, their GPU memory
    gone; nothing is killed by name or device), then C(systemctl start).
  - Waits until the server is ready (C(GET /health), I(served_model_name) in
    C(GET /v1/models), one generated token) and checks that a new process serves (a new
    C(InvocationID)). An unchanged, running service is only probed. In check mode nothing
    changes; one probe of the running server sets C(ready).
  - A change, once started, is not stopped by a lost connection to the controller (the
    step ignores SIGHUP); it runs to its end on the node, and the next run reads it.
  - When the new unit does not get ready and I(restore_on_failure) is true, the previous
    text goes back, the previous server is started and proven ready, and the module fails
    saying so (C(restored=true)); the last journal lines of the unit are in the message.
  - With I(output_gate), every start is also gated on the server's greedy output on a
    fixed prompt set. It must reproduce the node's reference (token match rate at least
    I(output_gate.threshold)) and must not loop (degeneration detector, with or without a
    reference). A failure is handled like a readiness failure (the previous unit goes
    back; a first unit is stopped). A unit without speculation (I(output_gate.record))
    records the reference when none fits; a speculative one takes the running server's
    output as the reference before it stops it, when none fits.
  - One round trip from the controller for the whole change; the returned identities
    (before and after) are what a rollout or sweep records.
version_added: "0.1.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is written or restarted; the running server is probed once.
  diff_mode:
    support: full
options:
  name:
    description: The systemd unit (e.g. C(specops-qwen3.6-27b.service)).
    type: str
    required: true
  path:
    description: The unit file.
    type: path
    required: true
  content:
    description: The unit text wanted at I(path).
    type: str
    required: true
  requires:
    description:
      - Paths the unit needs (its interpreter, its model), each mapped to what to do when
        it is missing. A missing one fails the task before anything changes; in check
        mode it is only noted (a new host may not have it yet).
    type: dict
    default: {}
  enabled:
    description: Enable the unit at boot.
    type: bool
    default: true
  restart:
    description: Restart even when the text is unchanged and the service runs.
    type: bool
    default: false
  drain_timeout:
    description:
      - Seconds to wait, before a running server is touched, until its C(/metrics) reports
        no running requests (C(vllm:num_requests_running), C(sglang:num_running_reqs)).
        Requests that outlive it fail the task with nothing changed. 0 does not wait.
    type: int
    default: 0
  restore_on_failure:
    description: Put the previous unit back and start it when the new one does not get ready.
    type: bool
    default: true
  stop_timeout:
    description: Seconds the old server's processes and GPU memory may take to go.
    type: int
    default: 300
  nvidia_smi:
    description: Path of nvidia-smi; default looks it up on PATH.
    type: path
  url:
    description: Base URL of the server as seen from this host.
    type: str
    required: true
  served_model_name:
    description: The model name C(/v1/models) must list.
    type: str
    required: true
  timeout:
    description: Seconds the server may take to get ready after the start.
    type: int
    default: 900
  interval:
    description: Seconds between readiness probes.
    type: float
    default: 2.0
  api_key:
    description: Bearer token for the server's API, if it wants one.
    type: str
  secret_environment:
    description:
      - Environment that must stay secret (API keys, hub tokens), written as
        C(KEY='value') lines to I(environment_file), mode 0600, root's; the unit names
        that file in C(EnvironmentFile=). A change restarts the server like a unit
        change, and a failed change restores the previous file with the unit. C({})
        removes the file; unset leaves it as it is (a rollout's restore of the unit).
        Never logged, never returned.
    type: dict
  environment_file:
    description: The file for I(secret_environment) (required with it).
    type: path
  audit_path:
    description:
      - Where to record what the unit runs after the step (its main process, the venv its
        interpreter lives in and that venv's build stamp), so the audit names the running
        build, never one that was only installed. Rewritten only when the process changed.
    type: path
  output_gate:
    description: The lossless-output gate (see C(plugins/module_utils/output_gate.py)); omit for none.
    type: dict
    suboptions:
      reference_path:
        description: Where the node keeps the reference outputs (JSON).
        type: path
        required: true
      model:
        description: The model the unit serves (path or hub id); keys the reference.
        type: str
        required: true
      record:
        description: This unit serves without speculation; its output becomes the reference when none fits.
        type: bool
        default: false
      refresh:
        description: With I(record), replace a fitting reference too.
        type: bool
        default: false
      threshold:
        description: Mean token match rate (common prefix over the reference's length) a new server must reach.
        type: float
        default: 0.9
      max_tokens:
        description: Tokens decoded per gate prompt.
        type: int
        default: 48
      max_run:
        description: One token repeated this many times in a row is degenerate.
        type: int
        default: 12
      max_period:
        description: Longest token cycle the loop detector looks for.
        type: int
        default: 4
      min_span:
        description: A cycle repeated over this many tokens is degenerate.
        type: int
        default: 24
      detect_loops:
        description:
          - The degeneration detector; false only for a model whose greedy output loops by
            construction (the lab's random-weight model). The match with the reference stays.
        type: bool
        default: true
      load:
        description:
          - Also decode the prompts inside a batch of this many other streamed requests
            in flight and compare those outputs with the reference too (0 is off).
        type: int
        default: 0
notes:
  - Supports check mode and diff mode (the unit text).
"""

EXAMPLES = r"""
- name: Ensure the server runs this unit and answers.
  specops.infra.service_unit:
    name: specops-qwen3.6-27b.service
    path: /etc/systemd/system/specops-qwen3.6-27b.service
    content: "{{ lookup('ansible.builtin.template', 'inference.service.j2') }}"
    url: http://127.0.0.1:8000
    served_model_name: qwen3.6-27b
    timeout: 900
"""

RETURN = r"""
restarted:
  description: Whether the server was (re)started.
  returned: always
  type: bool
written:
  description: Whether the unit text changed.
  returned: always
  type: bool
stale:
  description: >-
    Whether the running server started before its unchanged unit text was last written
    (a run stopped between the write and the restart); it is restarted.
  returned: always
  type: bool
restored:
  description: Whether the previous unit was put back after the new one failed.
  returned: always
  type: bool
before:
  description: C(systemctl show) identity before (invocation_id, main_pid, active_state, timestamps).
  returned: always
  type: dict
after:
  description: The identity after the change (or after the restore).
  returned: always
  type: dict
stop_seconds:
  description: Seconds the old server took to stop and release its GPU memory.
  returned: always
  type: float
ready_seconds:
  description: Seconds from the start's return to the first full readiness probe.
  returned: always
  type: float
start_to_healthy_seconds:
  description: systemd's main-process start to active (the unit's /health wait); null without a restart.
  returned: always
  type: float
ready:
  description: Whether the server answered (in check mode, one probe of the running server).
  returned: always
  type: bool
text_before:
  description: The unit text found at I(path) before the change ('' when there was none).
  returned: always
  type: str
secrets_changed:
  description: Whether I(environment_file) changed (its content is never returned).
  returned: always
  type: bool
missing:
  description: In check mode, the I(requires) paths that do not exist, with their hints.
  returned: always
  type: list
  elements: str
previous_path:
  description: Where the previous unit text was kept (null when nothing was replaced).
  returned: always
  type: str
audit_written:
  description: Whether I(audit_path) was (re)written (the serving process changed, or it was missing).
  returned: success, not in check mode
  type: bool
output_gate:
  description: >-
    The gate's verdict (ok, check C(lossless)/C(degeneration)/C(decode), message,
    match_rate, per_prompt, compared_on, reference_source, outputs, recorded); null when
    the gate did not run.
  returned: always
  type: dict
"""


from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.engine.build import record_running
from ansible_collections.specops.infra.plugins.module_utils.output_gate import (
    GateConfig,
    NodeGate,
)
from ansible_collections.specops.infra.plugins.module_utils.service_unit import (
    Readiness,
    SecretEnvironment,
    UnitChangeError,
    apply_unit,
    outlive_hangup,
    render_environment_file,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "path": {"type": "path", "required": True},
            "content": {"type": "str", "required": True},
            "requires": {"type": "dict", "default": {}},
            "enabled": {"type": "bool", "default": True},
            "restart": {"type": "bool", "default": False},
            "restore_on_failure": {"type": "bool", "default": True},
            "drain_timeout": {"type": "int", "default": 0},
            "stop_timeout": {"type": "int", "default": 300},
            "nvidia_smi": {"type": "path"},
            "url": {"type": "str", "required": True},
            "served_model_name": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 900},
            "interval": {"type": "float", "default": 2.0},
            "api_key": {"type": "str", "no_log": True},
            "secret_environment": {"type": "dict", "no_log": True},
            "environment_file": {"type": "path"},
            "audit_path": {"type": "path"},
            "output_gate": {
                "type": "dict",
                "options": {
                    "reference_path": {"type": "path", "required": True},
                    "model": {"type": "str", "required": True},
                    "record": {"type": "bool", "default": False},
                    "refresh": {"type": "bool", "default": False},
                    "threshold": {"type": "float", "default": 0.9},
                    "max_tokens": {"type": "int", "default": 48, "no_log": False},
                    "max_run": {"type": "int", "default": 12},
                    "max_period": {"type": "int", "default": 4},
                    "min_span": {"type": "int", "default": 24},
                    "detect_loops": {"type": "bool", "default": True},
                    "load": {"type": "int", "default": 0},
                },
            },
        },
        required_by={"secret_environment": "environment_file"},
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    gate = _gate(p)
    if gate is not None and gate.config.problems():
        module.fail_json(msg="output_gate." + "; output_gate.".join(gate.config.problems()))
    readiness = Readiness(
        url=p["url"], served_model_name=p["served_model_name"], timeout=p["timeout"],
        interval=p["interval"], api_key=p["api_key"],
    )  # fmt: skip
    before_text = ""
    try:
        with open(p["path"], encoding="utf-8", newline="") as fh:
            before_text = fh.read()
    except FileNotFoundError:
        pass
    diff = {"before": before_text, "after": p["content"],
            "before_header": p["path"], "after_header": p["path"]}  # fmt: skip
    secrets = None
    try:
        if p["secret_environment"] is not None:
            values = p["secret_environment"]
            text = render_environment_file({str(k): str(v) for k, v in values.items()})
            secrets = SecretEnvironment(p["environment_file"], text if values else None)
        if not module.check_mode:
            outlive_hangup()
        result = apply_unit(
            p["name"], p["path"], p["content"], readiness,
            enabled=p["enabled"], restart=p["restart"],
            restore_on_failure=p["restore_on_failure"], stop_timeout=p["stop_timeout"],
            nvidia_smi=p["nvidia_smi"], requires=p["requires"],
            drain_timeout=p["drain_timeout"], check_mode=module.check_mode,
            secrets=secrets, gate=gate,
        )  # fmt: skip
    except UnitChangeError as exc:
        msg = str(exc)
        if exc.journal:
            msg += f"\nlast journal lines of {p['name']}:\n{exc.journal}"
        failed = exc.result.as_dict()
        failed["changed"] = True
        _audit(p, exc.result.after.main_pid, exc.result.after.invocation_id)
        module.fail_json(msg=msg, **failed)
    except (RuntimeError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    out = result.as_dict()
    if not module.check_mode:
        out["audit_written"] = _audit(p, result.after.main_pid, result.after.invocation_id)
    if result.written:
        out["diff"] = diff
    module.exit_json(**out)


def _audit(p: dict[str, Any], main_pid: int, invocation_id: str) -> bool:
    """Record the running build (see engine_build.record_running); True when written."""
    if not p["audit_path"] or main_pid <= 0:
        return False
    return record_running(p["audit_path"], p["name"], main_pid, invocation_id)


def _gate(p: dict[str, Any]) -> NodeGate | None:
    opts = p["output_gate"]
    if not opts:
        return None
    config = GateConfig(
        threshold=opts["threshold"], max_tokens=opts["max_tokens"], max_run=opts["max_run"],
        max_period=opts["max_period"], min_span=opts["min_span"],
        detect_loops=opts["detect_loops"], load=opts["load"],
    )  # fmt: skip
    return NodeGate(
        url=p["url"], served_model_name=p["served_model_name"], model=opts["model"],
        reference_path=opts["reference_path"], config=config, record=opts["record"],
        refresh=opts["refresh"], api_key=p["api_key"],
    )  # fmt: skip


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
