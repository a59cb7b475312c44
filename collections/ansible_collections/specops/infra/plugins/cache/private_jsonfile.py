"""Fact cache plugin specops.infra.private_jsonfile: Ansible's jsonfile cache, private.

ansible.cfg names it (``fact_caching = specops.infra.private_jsonfile``) so that every
play of this repository, against any inventory, caches facts through it:

- the gathered environment (``ansible_env``) is never written: it holds whatever the
  process that gathered the facts had in its environment, on the controller for a
  local connection (``PROXMOX_TOKEN_SECRET``, ``HF_TOKEN``, an API key) and on a node
  for what ``SendEnv``/``AcceptEnv`` pass. Within the run that gathered it the fact is
  there as usual; a later run that reads the facts from this cache (``gathering =
  smart``) has no ``ansible_env`` unless a play gathers it again;
- the cache folder is made (and kept) mode 0700, every file in it 0600: jsonfile itself
  makes the folder with the umask (0755) and chmods every file 0644;
- files an earlier cache left there (0644, with ``ansible_env``) are made private and
  rewritten without that fact the first time the plugin opens the folder.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: private_jsonfile
version_added: "0.1.0"
short_description: JSON files per host, owner-only, without the gathered environment
description:
  - Ansible's C(ansible.builtin.jsonfile) fact cache, but the folder is mode 0700 and
    each file 0600, and the C(ansible_env) fact (the gathering process's environment,
    secrets included) is never written.
  - Files an earlier cache left in the folder are made private and rewritten without
    C(ansible_env) when the plugin starts.
author: specops maintainers (!UNKNOWN)
options:
  _uri:
    required: true
    description: Folder the cache keeps its files in (made mode 0700).
    env:
      - name: ANSIBLE_CACHE_PLUGIN_CONNECTION
    ini:
      - key: fact_caching_connection
        section: defaults
    type: path
  _prefix:
    description: User defined prefix to use when creating the JSON files.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_PREFIX
    ini:
      - key: fact_caching_prefix
        section: defaults
  _timeout:
    default: 86400
    description: Expiration timeout for the cache plugin data.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_TIMEOUT
    ini:
      - key: fact_caching_timeout
        section: defaults
    type: integer
"""


import contextlib
import json
import os
import stat
import tempfile
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.cache.jsonfile import CacheModule as JsonFileCacheModule
from ansible.utils.display import Display

__all__ = ["CacheModule", "without_secrets"]

display = Display()

# Facts never written: the environment of the process that gathered them.
_DROPPED = ("ansible_env", "env")
# ansible-core >= 2.19 hands cache plugins {"__payload__": "<the facts as JSON>"}.
_PAYLOAD = "__payload__"
_DIR_MODE = 0o700
_FILE_MODE = 0o600


def without_secrets(value: Any) -> Any:
    """``value`` (a host's cached facts, plain or as ansible-core's JSON payload) without
    the gathered environment; anything else unchanged. Never changes ``value`` itself."""
    if not isinstance(value, dict):
        return value
    if isinstance(value.get(_PAYLOAD), str):
        try:
            facts = json.loads(value[_PAYLOAD])
        except ValueError:
            return value
        if isinstance(facts, dict) and any(k in facts for k in _DROPPED):
            kept = {k: v for k, v in facts.items() if k not in _DROPPED}
            return {**value, _PAYLOAD: json.dumps(kept)}
        return value
    if any(k in value for k in _DROPPED):
        return {k: v for k, v in value.items() if k not in _DROPPED}
    return value


class CacheModule(JsonFileCacheModule):  # type: ignore[misc]  # ansible has no stubs
    """jsonfile with a 0700 folder, 0600 files and no ``ansible_env``."""

    def validate_cache_connection(self) -> None:
        directory = self._cache_dir
        if not directory:
            raise AnsibleError(
                "specops.infra.private_jsonfile needs fact_caching_connection (a folder)"
            )
        if not os.path.isdir(directory):
            try:
                os.makedirs(directory, mode=_DIR_MODE)
            except OSError as exc:
                raise AnsibleError(f"cannot make the fact cache folder {directory}: {exc}") from exc
        st = os.stat(directory)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != _DIR_MODE:
            os.chmod(directory, _DIR_MODE)
        super().validate_cache_connection()
        self._make_private(directory)

    def _make_private(self, directory: str) -> None:
        """Tighten and clean what an earlier (plain jsonfile) cache left here."""
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                continue
            if stat.S_IMODE(st.st_mode) != _FILE_MODE:
                os.chmod(path, _FILE_MODE)
            try:
                value = self._load(path)
            except (OSError, ValueError):
                continue
            cleaned = without_secrets(value)
            if cleaned is not value:
                self._write_private(cleaned, path)

    def _write_private(self, value: Any, path: str) -> None:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))  # mode 0600
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(value))
            os.chmod(tmp, _FILE_MODE)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def set(self, key: str, value: Any) -> None:
        self._cache[key] = value
        path = self._get_cache_file_name(key)
        try:
            self._write_private(without_secrets(value), path)
        except OSError as exc:
            display.warning(f"specops.infra.private_jsonfile: cannot write {path}: {exc}")
