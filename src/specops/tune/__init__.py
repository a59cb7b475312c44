"""Sweep and rollout of speculative-decoding settings.

- :mod:`~specops.tune.space`: the search space and its candidates (profiles).
- :mod:`~specops.tune.plain`: no speculation, the candidate beside every sweep and the
  rollout's second baseline; when a recorded plain run stands.
- :mod:`~specops.tune.score`: scores with intervals (pooled run-to-run spread) and the
  noise-aware comparison.
- :mod:`~specops.tune.search`: coordinate ascent and the full grid (pure: an evaluator
  is passed in).
- :mod:`~specops.tune.ledger`: the results file that makes a sweep resumable.
- :mod:`~specops.tune.apply`: the one interface that applies a profile and restarts.
- :mod:`~specops.tune.objective`: a candidate's objective read from bench results.
- :mod:`~specops.tune.config`: the sweep's config, validated.
- :mod:`~specops.tune.sweep`: the sweep driver (evaluation, the canary's final state).
- :mod:`~specops.tune.report`: the sweep's leaderboard, plot and vars snippet.
- :mod:`~specops.tune.rollout`: rollout gates and the rollout report.
"""

from __future__ import annotations

__all__: list[str] = []
