#!/usr/bin/python
"""Ansible module: check a speculative drafter against its target on the host, before the unit changes."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: drafter_preflight
short_description: Check a speculative drafter's raw config.json against its target model
description:
  - Finds the drafter and the target on the host (a directory, or a hub id in the hub
    cache that C(inference_engine) downloaded it into) and reads their C(config.json) as
    raw JSON (never through a transformers config class, which silently rebuilds
    C(layer_types)).
  - C(dflash)/C(ddtree) drafters - C(dflash_config.mask_token_id) against the target
    vocabulary (and tokenizer), each of C(dflash_config.target_layer_ids) against the
    target's C(num_hidden_layers), C(layer_types) against C(sliding_window) /
    C(use_sliding_window) and the expected window, C(block_size) against the profile.
    C(eagle)/C(eagle3)/C(draft_model) - C(vocab_size) (and an EAGLE head's C(hidden_size))
    equal to the target's; C(layer_types) rules when present.
  - A known drafter (recognised by hub id, hub-cache path or its target's and its own
    shape; the built-in table plus I(known)) must have its recorded layer pattern, window,
    mask token and target layer ids; this catches a config whose window was flattened and
    switched off without any window argument (vLLM takes none). I(config_sha256) pins the
    file byte for byte.
  - Fails naming each field, the value found and the value expected; an unknown drafter
    passes with a warning that lists what could not be checked. Changes nothing.
  - The same code backs C(specops profile check-drafter) on the controller.
version_added: "0.1.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - It changes nothing; check mode is the same run.
  diff_mode:
    support: N/A
    details:
      - It changes nothing.
options:
  method:
    description: The profile's method.
    type: str
    choices: [dflash, ddtree, eagle, eagle3, draft_model]
    default: dflash
  target:
    description: The target model - a directory or a hub id (looked up in I(hub_cache)).
    type: str
    required: true
    aliases: [target_dir]
  drafter:
    description: The drafter - a directory or a hub id (looked up in I(hub_cache)).
    type: str
    required: true
    aliases: [drafter_dir]
  target_revision:
    description: Revision of a hub-id target (branch, tag or commit).
    type: str
    default: main
  drafter_revision:
    description: Revision of a hub-id drafter.
    type: str
    default: main
  hub_cache:
    description: The Hugging Face hub cache the engine loads from (C(<cache_dir>/hub)).
    type: path
  window:
    description: Expected draft window in tokens (the profile's C(draft_window); 2048 for the seeds' drafter).
    type: int
  num_draft_tokens:
    description: The profile's C(num_draft_tokens) (DFlash block size); must not exceed the drafter's C(block_size).
    type: int
  known:
    description: More known drafters, keyed by hub id or path (C(expect), C(recognise), C(source), C(config_sha256)).
    type: dict
    default: {}
  config_sha256:
    description: The sha256 the drafter's C(config.json) must have.
    type: str
    default: ""
notes:
  - Supports check mode (it only reads). In check mode a drafter that is not downloaded
    yet is a warning (it is checked after the download).
"""

EXAMPLES = r"""
- name: Ensure the drafter fits the target model before the unit is written.
  specops.infra.drafter_preflight:
    method: dflash
    target: /srv/models/Qwen3.6-27B
    drafter: z-lab/Qwen3.6-27B-DFlash
    hub_cache: /var/cache/specops/hub
"""

RETURN = r"""
findings:
  description: Every problem found; empty when the drafter fits.
  returned: always
  type: list
  elements: dict
  contains:
    field:
      description: Dotted field name, e.g. C(drafter.dflash_config.mask_token_id).
      type: str
    found:
      description: The value in the file (C(absent) when the key is missing).
      type: raw
    expected:
      description: What would be valid.
      type: str
known:
  description: The known drafter it was checked against ('' when none).
  returned: always
  type: str
drafter_dir:
  description: The directory the drafter was read from.
  returned: always
  type: str
config_sha256:
  description: sha256 of the drafter's config.json (pin it with I(config_sha256)).
  returned: always
  type: str
"""


from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.dflash_drafter import format_findings
from ansible_collections.specops.infra.plugins.module_utils.drafter_check import (
    DRAFTER_METHODS,
    check,
    resolve,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "method": {"type": "str", "default": "dflash", "choices": list(DRAFTER_METHODS)},
            "target": {"type": "str", "required": True, "aliases": ["target_dir"]},
            "drafter": {"type": "str", "required": True, "aliases": ["drafter_dir"]},
            "target_revision": {"type": "str", "default": "main"},
            "drafter_revision": {"type": "str", "default": "main"},
            "hub_cache": {"type": "path"},
            "window": {"type": "int"},
            "num_draft_tokens": {"type": "int", "no_log": False},
            "known": {"type": "dict", "default": {}},
            "config_sha256": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    dirs: dict[str, str] = {}
    for role in ("target", "drafter"):
        where, why = resolve(p[role], p[f"{role}_revision"], p["hub_cache"])
        if where is None:
            if module.check_mode:
                module.warn(f"drafter preflight: {role} {why}; checked after the download")
                module.exit_json(changed=False, findings=[], known="", drafter_dir="",
                                 config_sha256="")  # fmt: skip
            module.fail_json(msg=f"drafter preflight: {role}: {why}", findings=[])
            return
        dirs[role] = where
    report = check(
        p["method"], dirs["target"], dirs["drafter"],
        drafter_id="" if p["drafter"].startswith("/") else p["drafter"],
        window=p["window"], num_draft_tokens=p["num_draft_tokens"], known=p["known"],
        config_sha256=p["config_sha256"],
    )  # fmt: skip
    for warning in report.warnings:
        module.warn(warning)
    result = {"changed": False, **report.as_dict()}
    result.pop("warnings")
    if report.findings:
        kind = "DFlash drafter" if p["method"] in ("dflash", "ddtree") else "drafter"
        module.fail_json(msg=f"{kind} preflight: {format_findings(report.findings)}", **result)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
