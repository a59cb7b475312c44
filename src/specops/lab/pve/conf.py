"""The PVE conf parser/writer of the local collection, importable from the package.

The one implementation lives in the collection (``module_utils/pve_conf.py``: it also
runs on managed hosts). pytest puts ``collections/`` on the path; the ``specops`` CLI
may run without it, so the repository's ``collections/`` is added when needed.
"""

from __future__ import annotations

from ansible_collections.specops.infra.plugins.module_utils import pve_conf

PveConf = pve_conf.PveConf
PveConfError = pve_conf.PveConfError
parse = pve_conf.parse
parse_property_string = pve_conf.parse_property_string
format_property_string = pve_conf.format_property_string
config_lock = pve_conf.config_lock

__all__ = [
    "PveConf",
    "PveConfError",
    "config_lock",
    "format_property_string",
    "parse",
    "parse_property_string",
    "pve_conf",
]
