#!/usr/bin/python
"""Ansible module: an engine's source tree, a base commit with pull requests applied in order."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_source
short_description: Make an engine's source tree from a base commit and pull requests applied in order
description:
  - Fetches the base commit of I(repo) and each of I(patches) (a ref and the commit it was
    resolved or pinned to) into I(dest), checks the base out and merges each patch in
    order (C(git merge --no-ff)) or cherry-picks it (I(method)). The engine is then
    installed from that directory (the inference_engine role's git build with
    C(inference_engine_git_patches)).
  - A patch that does not apply fails naming it, its commit and the conflicting files;
    the tree is built in C(<dest>.partial) and renamed into place, so a failure leaves no
    half-made tree.
  - Records what the tree holds (repository, base, patches, method, HEAD) in
    C(<dest>/.specops-source.json); a tree that already holds the same inputs, clean at
    that HEAD, is left as it is (changed false).
version_added: "0.2.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode it reports whether the tree would be made, and fetches and writes nothing.
  diff_mode:
    support: none
options:
  repo:
    description: The repository (URL or path) the base and the patches are fetched from.
    type: str
    required: true
  base_ref:
    description: The base ref (a tag, a branch, a pull request), for the record and the fetch.
    type: str
    required: true
  base_commit:
    description: The full 40-hex commit the base ref resolved to (or was pinned to).
    type: str
    required: true
  patches:
    description: The patches in order, each C({ref, commit}) (the commit resolved or pinned).
    type: list
    elements: dict
    default: []
  method:
    description: C(merge) each patch (the default), or C(cherry-pick) it (one commit each).
    type: str
    choices: [merge, cherry-pick]
    default: merge
  dest:
    description: The source tree's directory.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Ensure the vLLM tree is 0.20.1 with PRs 40727 and 40898 merged, in that order.
  specops.infra.engine_source:
    repo: https://github.com/vllm-project/vllm.git
    base_ref: refs/tags/v0.20.1
    base_commit: "{{ base_commit }}"
    patches:
      - {ref: refs/pull/40727/head, commit: "{{ pr_40727 }}"}
      - {ref: refs/pull/40898/head, commit: "{{ pr_40898 }}"}
    dest: /opt/specops/src/vllm-0123456789ab-ba9876543210
"""

RETURN = r"""
head:
  description: The tree's HEAD after the patches ('' in check mode when it would be made).
  returned: always
  type: str
patches:
  description: The patches applied, in order (ref and commit each).
  returned: always
  type: list
  elements: dict
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.engine.source import (
    METHODS,
    EngineSourceError,
    Patch,
    prepare,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "repo": {"type": "str", "required": True},
            "base_ref": {"type": "str", "required": True},
            "base_commit": {"type": "str", "required": True},
            "patches": {"type": "list", "elements": "dict", "default": []},
            "method": {"type": "str", "choices": list(METHODS), "default": "merge"},
            "dest": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    patches = [Patch(str(x.get("ref", "")), str(x.get("commit", ""))) for x in p["patches"]]
    try:
        result = prepare(
            p["repo"], Patch(p["base_ref"], p["base_commit"]), patches, p["dest"],
            method=p["method"], check_mode=module.check_mode,
        )  # fmt: skip
    except EngineSourceError as exc:
        module.fail_json(msg=str(exc), dest=p["dest"])
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
