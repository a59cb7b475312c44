"""Where specops finds the collection ``specops.infra``: where Ansible finds it.

The controller package imports the collection's code (``ansible_collections.specops.
infra.plugins.module_utils``: the speculative translator, the GPU catalogue, the error
classes), which is no Python distribution: ``ansible-galaxy collection install`` puts it
in a collections path. :func:`ensure` makes it importable from wherever Ansible would
load it:

1. Python's own import, when ``ansible_collections.specops.infra`` is on ``sys.path``
   already (a venv's site-packages, where docs/install.md installs it and where
   Ansible's ``collections_scan_sys_path`` finds it too; a checkout's venv links it
   there; the tests' ``pythonpath``);
2. else Ansible's own collection loader (``ansible.plugins.loader.init_plugin_loader``,
   what every Ansible command starts with), configured as Ansible is in this directory:
   ``ANSIBLE_COLLECTIONS_PATH``, the ``collections_path`` of the ``ansible.cfg`` in use,
   the default paths (``~/.ansible/collections``, ``/usr/share/ansible/collections``)
   and ``sys.path``.

``specops`` calls :func:`ensure` when it is imported; :func:`require` (the CLI, before
any command loads) turns an absent collection, or one of another version than this
package's, into one error that names the install command.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

__all__ = ["NAME", "CollectionError", "ensure", "installed_version", "require"]

NAME = "specops.infra"
PACKAGE = "ansible_collections.specops.infra"
_VERSION_LINE = re.compile(r"^version:\s*['\"]?([^'\"\s#]+)", re.MULTILINE)


class CollectionError(Exception):
    """The collection is not where Ansible finds it, or is not this package's version."""


def _ours(name: str) -> bool:
    return name == "ansible_collections" or name.startswith("ansible_collections.")


def _found() -> Path | None:
    """The collection's directory, when ``ansible_collections.specops.infra`` imports.
    A probe that fails leaves nothing imported: the namespace packages it made (a
    venv's ``ansible_collections`` of the ``ansible`` bundle, without specops) would
    stand in front of Ansible's collection loader."""
    before = {name for name in sys.modules if _ours(name)}
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):  # a parent package missing, or a bad spec
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        for name in [n for n in sys.modules if _ours(n) and n not in before]:
            del sys.modules[name]
        return None
    return Path(locations[0])


def ensure() -> Path | None:
    """Make the collection importable (see the module's doc); its directory, or None
    when Ansible finds it nowhere. Never raises: an Ansible that cannot start here says
    why when the CLI runs an Ansible command."""
    found = _found()
    if found is not None:
        return found
    try:
        from ansible.utils.collection_loader import AnsibleCollectionConfig  # noqa: PLC0415

        if AnsibleCollectionConfig.collection_finder is None:  # not inside an Ansible process
            from ansible.plugins.loader import init_plugin_loader  # noqa: PLC0415

            init_plugin_loader()
    except Exception:  # no Ansible, or one that cannot read its configuration
        return None
    return _found()


def searched() -> list[str]:
    """Where Ansible looks for collections here (for the message of a missing one)."""
    try:
        from ansible import constants  # noqa: PLC0415

        paths = [str(p) for p in constants.COLLECTIONS_PATHS]
        scan = bool(constants.COLLECTIONS_SCAN_SYS_PATH)
    except Exception:  # an Ansible that cannot read its configuration
        return ["(ansible-core is not importable: pip install the specops wheel again)"]
    return [*paths, "this Python's sys.path"] if scan else paths


def installed_version(path: Path) -> str | None:
    """The version of the collection at ``path``: its ``MANIFEST.json`` (an installed
    collection), else its ``galaxy.yml`` (a checkout's)."""
    manifest = path / "MANIFEST.json"
    try:
        if manifest.is_file():
            info = json.loads(manifest.read_text(encoding="utf-8"))["collection_info"]
            return str(info["version"])
        found = _VERSION_LINE.search((path / "galaxy.yml").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found.group(1) if found else None


def require(version: str) -> Path:
    """The collection's directory, importable; :class:`CollectionError` when Ansible
    finds none, or one whose version is not ``version`` (this package's)."""
    found = ensure()
    install = f"ansible-galaxy collection install specops-infra-{version}.tar.gz"
    if found is None:
        raise CollectionError(
            f"the collection {NAME} is not installed where Ansible finds it (searched: "
            f"{', '.join(searched())}); install the one of this specops {version}: "
            f"{install} (docs/install.md)"
        )
    have = installed_version(found)
    if have != version:
        raise CollectionError(
            f"specops {version} runs with the collection {NAME} {version}; the one Ansible"
            f" finds, at {found}, is {have or 'of no known version'}: install this"
            f" release's collection ({install} --force) or the wheel of its version"
        )
    return found
