"""Did warm-up decide the ranking? Each candidate's first run after its restart beside
its next run on the same server process.

On the H200 (SGLang 0.5.11, ``tests/fixtures/gpu-serving/h200-sglang-2026-12-03-run2``)
every draft-model candidate's first run after its restart measured 0.50-0.59 x its
second (706 vs 1374 tok/s at ``num_steps=3``): two warm-up requests never reached the
batch shapes the engine compiles at C = 4 and 16, and the medians of two runs mixed a
cold run with a warm one. The bench now warms every cell of the plan before measuring
(``Plan.warmup_waves``); this check shows whether that was enough.

A candidate is *flagged* when its first run (the one after its restart) and its second
(no restart between) differ beyond the noise band: ``max(min_gain, z x s)``, with ``s``
the relative standard error of the two runs' objectives from the bootstrap over each
run's requests (:meth:`specops.tune.objective.Objective.samples`), or ``min_gain`` alone
when the runs' requests are not at hand (a ledger whose results files were not kept).
The search's own pooled spread is not the band: the warm-up effect inflates it.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specops.bench.results import Results
from specops.tune.ledger import RunRecord
from specops.tune.objective import Objective
from specops.tune.score import Scoring

__all__ = ["WarmupCheck", "warmup_check"]


@dataclass(frozen=True)
class WarmupCheck:
    key: str
    first: float  # objective of the run right after the restart
    second: float  # objective of the next run on the same server process
    band: float  # relative half-width the ratio may stray from 1 within noise
    basis: str  # where the band comes from, in words

    @property
    def ratio(self) -> float:
        return self.first / self.second if self.second else math.nan

    @property
    def flagged(self) -> bool:
        return not math.isnan(self.ratio) and abs(self.ratio - 1.0) > self.band

    @property
    def text(self) -> str:
        verdict = "warm-up affected" if self.flagged else "within noise"
        return f"{self.ratio:.2f} ({verdict}, band +-{self.band:.1%})"


def _log_sd(samples: Sequence[float]) -> float | None:
    logs = [math.log(v) for v in samples if v > 0]
    return statistics.stdev(logs) if len(logs) >= 2 else None


def warmup_check(
    key: str,
    runs: Sequence[RunRecord],
    results_of: Callable[[RunRecord], Results | None],
    objective: Objective,
    scoring: Scoring,
) -> WarmupCheck | None:
    """The check of one candidate (its ledger runs, by repeat), or None when it has no
    run after a restart followed by one on the same server (a recorded run stands for
    it, a run failed, or it ran once)."""
    ordered = sorted(runs, key=lambda r: r.repeat)
    for first, second in itertools.pairwise(ordered):
        restarted = bool((first.restart or {}).get("restarted"))
        again = bool((second.restart or {}).get("restarted"))
        if not restarted or again or not (first.measurement.ok and second.measurement.ok):
            continue
        band, basis = scoring.min_gain, f"min_gain {scoring.min_gain:.0%} (no requests at hand)"
        a, b = results_of(first), results_of(second)
        sa = objective.samples(a) if a is not None else None
        sb = objective.samples(b) if b is not None else None
        sd_a, sd_b = (_log_sd(sa) if sa else None), (_log_sd(sb) if sb else None)
        if sd_a is not None and sd_b is not None:
            s = math.hypot(sd_a, sd_b)
            band = max(scoring.min_gain, scoring.z * s)
            basis = f"the runs' requests (bootstrap, {scoring.z:g} x {s:.1%})"
        return WarmupCheck(
            key, first.measurement.objective, second.measurement.objective, band, basis
        )
    return None
