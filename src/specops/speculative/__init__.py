"""Speculative decoding: the engine-neutral profile, its translator, the drafter preflight.

- :class:`SpeculativeProfile` (``profile``): what an inventory says.
- :class:`Engine` (``engines``): which engine build serves it, with its real flag list.
- :func:`to_argv` / :func:`to_env` (``translate``): the profile as that engine's flags.
- :func:`check_drafter` (``drafter``): a DFlash drafter's config.json against its target.

The unit template (via the ``specops.infra.speculative_argv`` filter), the sweep and
the table in docs/speculative.md all go through these functions; nothing else spells an engine flag.
"""

from __future__ import annotations

from specops.speculative.engines import Engine, known_versions
from specops.speculative.profile import INT_FIELDS, METHODS, SpeculativeProfile
from specops.speculative.translate import from_argv, to_argv, to_env

__all__ = [
    "INT_FIELDS",
    "METHODS",
    "Engine",
    "SpeculativeProfile",
    "from_argv",
    "known_versions",
    "to_argv",
    "to_env",
]
