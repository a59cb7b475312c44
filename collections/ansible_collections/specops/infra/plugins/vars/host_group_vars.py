"""Vars plugin ``specops.infra.host_group_vars``: Ansible's own, whose errors name the file.

ansible-core 2.19's ``host_group_vars`` re-raises a YAML error of a group_vars or
host_vars file as its bare message (``YAML parsing failed: While parsing a flow
sequence did not find expected ',' or ']'.``): the file and line are lost, in
``ansible-playbook``'s output and in a filter that reads ``hostvars`` (the preflight).
This one loads the same files the same way (the builtin's own functions) and puts
``<file>:<line>:<column>`` in front of such a message. Enabled in ansible.cfg
(``vars_plugins_enabled``) in place of the builtin.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: host_group_vars
version_added: "0.1.0"
short_description: Load group_vars and host_vars as Ansible does, naming the file of a syntax error
description:
  - Ansible's C(ansible.builtin.host_group_vars) (its functions; same files, order and options).
  - A file that does not parse fails with C(<file>:<line>:<column>) in front of Ansible's message
    (the builtin drops the file name).
author: specops maintainers (!UNKNOWN)
options:
  stage:
    ini:
      - key: stage
        section: vars_host_group_vars
    env:
      - name: ANSIBLE_VARS_PLUGIN_STAGE
  _valid_extensions:
    default: [".yml", ".yaml", ".json"]
    description:
      - Check all of these extensions when looking for variable files (YAML, JSON or vaulted).
    env:
      - name: ANSIBLE_YAML_FILENAME_EXT
    ini:
      - key: yaml_valid_extensions
        section: defaults
    type: list
    elements: string
extends_documentation_fragment:
  - vars_plugin_staging
"""


from typing import Any

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.plugins.vars import BaseVarsPlugin
from ansible.plugins.vars.host_group_vars import VarsModule as _Builtin


def _where(exc: BaseException, found: str) -> str:
    """``file:line:column`` of the error (its origin, else the file being loaded)."""
    seen: BaseException | None = exc
    while seen is not None:
        origin = getattr(seen, "obj", None)
        path = getattr(origin, "path", None)
        if path:
            line = getattr(origin, "line_num", None)
            col = getattr(origin, "col_num", None)
            return f"{path}{f':{line}' if line else ''}{f':{col}' if line and col else ''}"
        seen = seen.__cause__ or seen.__context__
    return found


class VarsModule(BaseVarsPlugin):  # type: ignore[misc]  # ansible is untyped
    """The builtin's loading (its functions, not a subclass: a collection vars plugin
    must not carry the builtin's ``REQUIRES_ENABLED``), with the file in front of a load
    error's message."""

    is_stateless = True
    get_vars = _Builtin.get_vars

    def load_found_files(self, loader: Any, data: Any, found_files: list[str]) -> Any:
        for found in found_files:
            try:
                data = _Builtin.load_found_files(self, loader, data, [found])
            except AnsibleError as exc:
                if str(found) in str(exc):
                    raise
                raise AnsibleParserError(f"{_where(exc, str(found))}: {exc}") from exc
        return data
