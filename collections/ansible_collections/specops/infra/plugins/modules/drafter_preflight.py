#!/usr/bin/python
"""Ansible module: check a DFlash drafter's config.json against its target's, on the host."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.dflash_drafter import (
    check_drafter_dirs,
    format_findings,
)

DOCUMENTATION = r"""
---
module: drafter_preflight
short_description: Check a DFlash drafter's raw config.json against its target model
description:
  - Reads C(config.json) of the target model and of the DFlash drafter as raw JSON (never
    through a transformers config class, which silently rebuilds C(layer_types)) and checks
    C(dflash_config.mask_token_id) against the target vocabulary, each of
    C(dflash_config.target_layer_ids) against the target's C(num_hidden_layers),
    C(layer_types) (one entry per drafter layer) against C(sliding_window) /
    C(use_sliding_window) and the expected window, and C(block_size) against the profile's
    C(num_draft_tokens).
  - Fails naming each field, the value found and the value expected. Changes nothing.
  - The same code backs C(specops profile check-drafter) on the controller.
version_added: "0.1.0"
author: specops
options:
  target_dir:
    description: Directory of the target model (holds C(config.json); C(tokenizer_config.json) is used when present).
    type: path
    required: true
  drafter_dir:
    description: Directory of the DFlash drafter (holds C(config.json)).
    type: path
    required: true
  window:
    description: Expected draft window in tokens (the profile's C(draft_window); 2048 for the seeds' drafter).
    type: int
  num_draft_tokens:
    description: The profile's C(num_draft_tokens) (DFlash block size); must not exceed the drafter's C(block_size).
    type: int
notes:
  - Supports check mode (it only reads).
"""

EXAMPLES = r"""
- name: Ensure the DFlash drafter fits the target model before the unit is written.
  specops.infra.drafter_preflight:
    target_dir: /srv/models/Qwen3.6-27B
    drafter_dir: /srv/models/Qwen3.6-27B-DFlash
    window: "{{ inference_service_speculative.draft_window | default(omit) }}"
    num_draft_tokens: "{{ inference_service_speculative.num_draft_tokens | default(omit) }}"
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
"""


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "target_dir": {"type": "path", "required": True},
            "drafter_dir": {"type": "path", "required": True},
            "window": {"type": "int"},
            "num_draft_tokens": {"type": "int"},
        },
        supports_check_mode=True,
    )
    params = module.params
    findings = check_drafter_dirs(
        params["target_dir"],
        params["drafter_dir"],
        window=params["window"],
        num_draft_tokens=params["num_draft_tokens"],
    )
    result = {"changed": False, "findings": [f.as_dict() for f in findings]}
    if findings:
        module.fail_json(msg=f"DFlash drafter preflight: {format_findings(findings)}", **result)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
