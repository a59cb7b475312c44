"""Speculative decoding: the engine-neutral profile, its translator, the drafter preflight.

The profile, the engines and the translator live in the collection ``specops.infra``
(``plugins/module_utils/speculative_{profile,engines,translate}.py``: its filters render
a profile with them); this package re-exports them for the controller:

- :class:`SpeculativeProfile` (``speculative.profile``): what an inventory says.
- :class:`Engine` (``speculative.engines``): which engine build serves it, with its real
  flag list.
- :func:`launch` (``speculative.translate``): the profile as that engine's flags and
  environment, in one pass (:func:`to_argv` / :func:`to_env`: one of the two); with
  :class:`TargetModel` (the served model's path and architectures) what the engine needs
  for that architecture (SGLang NEXTN's draft path).
- :func:`check_drafter` (``drafter``): a DFlash drafter's config.json against its target.

The unit template (via the ``specops.infra.speculative_launch`` filter), the sweep and
the table in docs/speculative.md all go through these functions; nothing else spells an engine flag.
"""

from __future__ import annotations

from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import (
    ENGINE_NAMES,
    Engine,
    known_versions,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    INT_FIELDS,
    METHODS,
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import (
    TargetModel,
    from_argv,
    launch,
    to_argv,
    to_env,
)

__all__ = [
    "ENGINE_NAMES",
    "INT_FIELDS",
    "METHODS",
    "Engine",
    "SpeculativeProfile",
    "TargetModel",
    "from_argv",
    "known_versions",
    "launch",
    "to_argv",
    "to_env",
]
