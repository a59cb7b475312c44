"""Speculative-decoding acceptance: vLLM counters and SGLang per-request meta_info.

vLLM exposes cumulative ``_total`` counters on ``/metrics``; a cell's acceptance comes
from a snapshot before and after the measured phase (after warm-up), never from a
running total:

- mean acceptance length = 1 + d(accepted) / d(drafts)
- per-position rate[i] = d(accepted_per_pos[i]) / d(drafts)
- draft acceptance rate = d(accepted) / d(draft_tokens)

SGLang has no per-position counters; its native ``/generate`` ``meta_info`` carries
per request ``spec_verify_ct`` (acceptance length = completion_tokens / verify steps)
and, depending on version, a histogram (``hist[k]`` = verify steps that accepted k
drafts) and/or a count of accepted drafts, under several spellings; all are read.

Prometheus text is parsed with ``prometheus_client``'s parser, not regex.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import (
    ENGINES,
    SpecMetaNames,
)
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "SGLANG_SPEC_FIELDS",
    "Acceptance",
    "SpecCounters",
    "acceptance_from_sglang",
    "acceptance_from_vllm",
    "parse_spec_counters",
]

# Counter name -> what it counts, for every engine whose descriptor names its speculative
# counters (engines.ENGINES: vLLM's spec_decode family; SGLang reports per request).
_COUNTERS: dict[str, str] = {
    name: role
    for d in ENGINES.values()
    if d.spec_counters is not None
    for role, name in (
        ("drafts", d.spec_counters.drafts),
        ("draft_tokens", d.spec_counters.draft_tokens),
        ("accepted", d.spec_counters.accepted),
        ("per_pos", d.spec_counters.accepted_per_pos),
    )
}


def _sglang_meta() -> SpecMetaNames:
    """SGLang's per-request meta_info spellings (engines.ENGINES: its spec_meta)."""
    meta = ENGINES["sglang"].spec_meta
    if meta is None:
        raise RuntimeError("module_utils/engine/descriptor.py: the sglang row names no spec_meta")
    return meta


_META = _sglang_meta()
SGLANG_SPEC_FIELDS: tuple[str, ...] = _META.all
_HIST_KEYS = _META.histograms
_ACCEPTED_KEYS = _META.accepted_drafts


@dataclass(frozen=True)
class SpecCounters:
    """One snapshot of vLLM's speculative counters, summed over engines/labels."""

    present: bool  # the server exports spec_decode counters at all
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)


def _family_base(name: str) -> str:
    # The parser strips "_total" from counter family names; samples keep it.
    return name[: -len("_total")] if name.endswith("_total") else name


def parse_spec_counters(text: str) -> SpecCounters:
    """Read vLLM spec_decode counters out of Prometheus exposition text."""
    present = False
    drafts = draft_tokens = accepted = 0.0
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        role = _COUNTERS.get(_family_base(family.name))
        if role is None:
            continue
        present = True
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            if role == "drafts":
                drafts += sample.value
            elif role == "draft_tokens":
                draft_tokens += sample.value
            elif role == "accepted":
                accepted += sample.value
            else:
                pos = int(sample.labels.get("position", "0"))
                per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
    return SpecCounters(present, drafts, draft_tokens, accepted, per_pos)


@dataclass(frozen=True)
class Acceptance:
    """A cell's speculative acceptance; ``source`` says where it was read."""

    source: str  # "vllm-metrics", "sglang-meta_info" or "none"
    mean_acceptance_length: float | None = None
    draft_acceptance_rate: float | None = None
    per_position: list[float] = field(default_factory=list)  # rate at draft position i
    drafts: float = 0.0  # verify steps / drafts in the cell
    accepted: float = 0.0  # accepted draft tokens in the cell
    draft_tokens: float | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Acceptance:
        return cls(**dict(data))


def acceptance_from_vllm(before: SpecCounters, after: SpecCounters) -> Acceptance:
    """Acceptance over a cell from two counter snapshots (after minus before)."""
    if not (before.present and after.present):
        return Acceptance(source="none", note="server exports no spec_decode counters")
    d_drafts = after.drafts - before.drafts
    d_accepted = after.accepted - before.accepted
    d_tokens = after.draft_tokens - before.draft_tokens
    if d_drafts < 0 or d_accepted < 0:
        return Acceptance(
            source="vllm-metrics", note="counters went backwards (server restarted mid-cell?)"
        )
    if d_drafts == 0:
        return Acceptance(source="vllm-metrics", note="no drafts in this cell")
    positions = sorted(set(after.accepted_per_pos) | set(before.accepted_per_pos))
    per_pos = [
        (after.accepted_per_pos.get(p, 0.0) - before.accepted_per_pos.get(p, 0.0)) / d_drafts
        for p in positions
    ]
    return Acceptance(
        source="vllm-metrics",
        mean_acceptance_length=1.0 + d_accepted / d_drafts,
        draft_acceptance_rate=d_accepted / d_tokens if d_tokens > 0 else None,
        per_position=per_pos,
        drafts=d_drafts,
        accepted=d_accepted,
        draft_tokens=d_tokens,
    )


def _histogram(spec: Mapping[str, Any]) -> list[float] | None:
    for key in _HIST_KEYS:
        value = spec.get(key)
        if isinstance(value, list) and all(isinstance(v, int | float) for v in value):
            return [float(v) for v in value]
    return None


def acceptance_from_sglang(
    requests: Iterable[tuple[int | None, Mapping[str, Any] | None]],
) -> Acceptance:
    """Acceptance over a cell from (output_tokens, meta_info spec fields) per request.

    Mean acceptance length = sum(completion_tokens) / sum(spec_verify_ct). Accepted
    drafts come from a histogram (sum k * hist[k]), else an accepted-drafts count, else
    ``spec_accept_token_num``, else completion_tokens - verify steps. Per-position
    rates need a histogram: rate[i] = steps accepting more than i drafts / steps.
    """
    verify = 0.0
    tokens = 0.0
    accepted = 0.0
    hist_total: list[float] = []
    have_any = False
    for out_tokens, spec in requests:
        if not spec or out_tokens is None:
            continue
        ct = spec.get(_META.verify_count)
        if not isinstance(ct, int | float) or ct <= 0:
            continue
        have_any = True
        verify += ct
        tokens += out_tokens
        hist = _histogram(spec)
        if hist is not None:
            if len(hist_total) < len(hist):
                hist_total.extend([0.0] * (len(hist) - len(hist_total)))
            for k, count in enumerate(hist):
                hist_total[k] += count
            accepted += sum(k * c for k, c in enumerate(hist))
            continue
        for key in _ACCEPTED_KEYS:
            if isinstance(spec.get(key), int | float):
                accepted += float(spec[key])
                break
        else:
            if isinstance(spec.get(_META.accepted_tokens), int | float):
                accepted += float(spec[_META.accepted_tokens])
            else:
                accepted += max(out_tokens - ct, 0)
    if not have_any:
        return Acceptance(source="none", note="no spec_verify_ct in meta_info")
    return Acceptance(
        source="sglang-meta_info",
        mean_acceptance_length=tokens / verify,
        per_position=_positions(hist_total),
        drafts=verify,
        accepted=accepted,
    )


def _positions(hist: Sequence[float]) -> list[float]:
    steps = sum(hist)
    if steps <= 0:
        return []
    # position i (0-based) is accepted in a step that accepted more than i drafts
    return [sum(hist[i + 1 :]) / steps for i in range(len(hist) - 1)]
