"""Filter ``controller_cli``: how a role runs the specops CLI on the controller.

A collection's playbook run by name (``ansible-playbook specops.infra.deploy``) runs its
controller commands in the playbook's folder inside the installed collection, where no
``ansible.cfg`` is: the CLI's Python would read Ansible's defaults and miss the site's
``collections_path`` (and so the collection itself). The argv this filter gives names the
run's own configuration file (``ansible_config_file``) in ``ANSIBLE_CONFIG``, so the CLI,
and every ``ansible-playbook`` it starts, is configured as the run that called it.

    {{ ansible_playbook_python | specops.infra.controller_cli(ansible_config_file | default('')) }}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FilterModule", "controller_cli"]


def controller_cli(
    python: str, config_file: str | None = None, module: str = "specops"
) -> list[str]:
    """``[ENV, ANSIBLE_CONFIG=<file>, python, -m, module]``; without the environment when
    the run read no configuration file (Ansible's defaults are then the CLI's too)."""
    argv = [str(python), "-m", str(module)]
    config = str(config_file or "")
    return ["/usr/bin/env", f"ANSIBLE_CONFIG={config}", *argv] if config else argv


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"controller_cli": controller_cli}
