#!/usr/bin/python
"""Ansible module model_weights: bytes a decode step reads from a model's weights."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_weights
short_description: Read a model directory's safetensors headers and size one decode step
description:
  - Sums every tensor's stored size from the safetensors headers of a model directory
    (no tensor data is read) and returns the bytes one decode step reads, the
    roofline's bytes per token. For mixtures of experts only C(num_experts_per_tok) of
    C(num_experts) routed experts count (from C(config.json)); the input embedding
    (when the output head is separate), vision/audio towers and MTP layers are left out.
  - Read-only; check mode is the same run. The logic is
    C(module_utils/model_weights.py).
  - With I(missing_ok) a directory without weights is not a failure; C(found) is then
    false and C(reason) says why.
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
  path:
    description: The model directory (config.json, *.safetensors, index).
    type: path
    required: true
  missing_ok:
    description: Return C(found=false) with the reason instead of failing.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Size a decode step of the served model.
  specops.infra.model_weights:
    path: /srv/models/qwen3.6-27b
    missing_ok: true
  register: weights
"""

RETURN = r"""
found:
  description: Whether weights were read.
  returned: always
  type: bool
reason:
  description: Why not, when I(found) is false.
  returned: when found is false
  type: str
weights:
  description: The reading (empty when I(found) is false).
  returned: always
  type: dict
  contains:
    bytes_per_token: {description: "Bytes one decode step reads.", type: int}
    total_bytes: {description: "All tensors stored.", type: int}
    expert_bytes: {description: "Routed-expert tensors (all experts).", type: int}
    active_expert_bytes: {description: "The share a token uses.", type: int}
    num_experts: {description: "Routed experts (config.json), null if not MoE.", type: int}
    experts_per_token: {description: "Experts per token (config.json).", type: int}
    left_out_bytes: {description: "Input embedding, vision/audio towers, MTP layers.", type: int}
    shards: {description: "Safetensors files read.", type: int}
    tensors: {description: "Tensors counted.", type: int}
"""

# Imports follow the documentation blocks, as Ansible modules lay them out.
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.model_weights import (
    ModelWeightsError,
    read_weights,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "missing_ok": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params: dict[str, Any] = module.params
    try:
        weights = read_weights(params["path"])
    except ModelWeightsError as exc:
        if not params["missing_ok"]:
            module.fail_json(msg=f"path: {exc}")
        module.exit_json(changed=False, found=False, reason=str(exc), weights={})
    module.exit_json(changed=False, found=True, weights=weights)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
