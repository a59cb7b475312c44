"""Runs side by side, with intervals: the speed-up over a baseline per cell, and the
concurrency above which speculation stops paying.

A *run set* is one or more results documents of the same server setting (a run, or a
sweep candidate's runs): its cells are pooled by (concurrency, context length), never by
position (:func:`cell_boots`), and every figure comes with its 95 % bootstrap interval
over the requests (:mod:`specops.bench.intervals`).

Where speculation stops paying (:func:`crossover`): per context length, a candidate
*beats* the baseline (no speculation) at a concurrency when the whole interval of its
output tok/s over the baseline's lies above 1, *loses* when it lies below 1, and is
*within noise* otherwise. It pays up to the highest concurrency at which it beats the
baseline with every lower one beating it too; above it, it no longer beats it beyond
noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specops.bench.intervals import CellBoot, Estimate, ratio_estimate
from specops.bench.results import Cell, Results

__all__ = ["CellKey", "Crossover", "cell_boots", "crossover", "speedup"]

CellKey = tuple[int, int]  # (concurrency, context tokens)


def cell_boots(runs: Sequence[Results]) -> dict[CellKey, CellBoot]:
    """One bootstrap per (concurrency, context) over every run's cell of that key."""
    by_key: dict[CellKey, list[Cell]] = {}
    for results in runs:
        for cell in results.cells:
            by_key.setdefault((cell.concurrency, cell.context_tokens), []).append(cell)
    return {key: CellBoot(cells) for key, cells in sorted(by_key.items())}


def speedup(candidate: CellBoot, baseline: CellBoot) -> Estimate:
    """Output tok/s of ``candidate`` over ``baseline``'s, with its interval."""
    return ratio_estimate(candidate, baseline, "output_tok_s")


@dataclass(frozen=True)
class Crossover:
    """Where a candidate stops paying over the baseline at one context length."""

    context: int
    beats: tuple[int, ...]  # concurrencies where it beats the baseline beyond noise
    within: tuple[int, ...]  # ... where the interval holds 1 (or no interval)
    loses: tuple[int, ...]  # ... where it is slower beyond noise
    pays_up_to: int | None  # the highest C of an unbroken run of wins from the lowest C
    measured: tuple[int, ...] = field(default=())

    @property
    def text(self) -> str:
        """In words, e.g. ``512 in: pays up to C=4; not beyond noise from C=16``."""
        head = f"{self.context} in: "
        if not self.measured:
            return head + "not measured against the baseline"
        if self.pays_up_to is None:
            if self.loses and not self.beats and not self.within:
                return head + "slower than the baseline at every C"
            return head + "never beats the baseline beyond noise"
        above = [c for c in self.measured if c > self.pays_up_to]
        if not above:
            return head + f"pays at every C measured (up to C={self.pays_up_to})"
        verdict = "slower beyond noise" if above[0] in self.loses else "not beyond noise"
        return head + f"pays up to C={self.pays_up_to}; {verdict} from C={above[0]}"


def crossover(
    candidate: Mapping[CellKey, CellBoot], baseline: Mapping[CellKey, CellBoot]
) -> list[Crossover]:
    """Per context length of ``candidate``: where it beats, matches, loses to the
    baseline (see the module docstring)."""
    out = []
    for ctx in sorted({k[1] for k in candidate}):
        beats: list[int] = []
        within: list[int] = []
        loses: list[int] = []
        for conc in sorted(c for c, x in candidate if x == ctx):
            base = baseline.get((conc, ctx))
            if base is None:
                continue
            est = speedup(candidate[(conc, ctx)], base)
            if est.shown and est.low is not None and est.low > 1.0:
                beats.append(conc)
            elif est.shown and est.high is not None and est.high < 1.0:
                loses.append(conc)
            else:
                within.append(conc)
        measured = tuple(sorted(beats + within + loses))
        pays: int | None = None
        for conc in measured:
            if conc not in beats:
                break
            pays = conc
        out.append(Crossover(ctx, tuple(beats), tuple(within), tuple(loses), pays, measured))
    return out
