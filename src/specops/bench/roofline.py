"""Bandwidth roofline for single-stream decode, scaled by speculative acceptance.

Without speculation a decode step reads the model's weights once and yields one token,
so single-stream decode cannot beat ``bandwidth / bytes_per_token`` tokens/s. With
speculation a verify step still reads the weights about once but yields the mean
acceptance length tau of tokens, so the bound becomes ``tau * bandwidth /
bytes_per_token``. The report shows achieved single-stream decode (the median
per-request decode speed at concurrency 1) as a percentage of that bound.

Inputs (:func:`resolve`, from the plan's ``roofline`` section, which the playbooks fill
from the inventory):

- bandwidth: given, or the GPU catalogue's (``module_utils/gpu_catalogue.py``) per-card
  bandwidth of the container's card model times the cards one model replica spans:
  tensor-parallel x pipeline-parallel size (from the engine's arguments when not
  given; 1 when they say nothing), which must fit the container's card count. Cards a
  container has beyond one replica serve other replicas; they do not speed a stream.
- bytes per token: given (an inventory override), or the ``model_weights`` module's
  reading of the model's safetensors (active parameters for MoE).

Weights only: KV-cache reads grow with the context and are not in the bound, so long
contexts sit further below it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils import gpu_catalogue

from specops.bench.plan import Roofline
from specops.bench.results import Results

__all__ = ["Hardware", "RooflineRow", "parallel_sizes", "resolve", "roofline_rows"]

_TP = ("--tensor-parallel-size", "-tp", "--tp-size", "--tp")
_PP = ("--pipeline-parallel-size", "-pp", "--pp-size", "--pp")


@dataclass(frozen=True)
class Hardware:
    """Resolved roofline inputs, with where each number came from."""

    bandwidth_gb_s: float  # aggregate of the cards one replica spans
    bytes_per_token: float
    bandwidth_source: str
    bytes_source: str
    gpu: str | None = None  # product name (catalogue)
    cards: int | None = None  # cards one replica spans (tp x pp)
    gpu_count: int | None = None  # cards in the container
    per_card_gb_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _flag_value(args: Sequence[str], names: tuple[str, ...]) -> int | None:
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name not in names:
            continue
        text = value if eq else (args[i + 1] if i + 1 < len(args) else "")
        try:
            return int(text)
        except ValueError:
            return None
    return None


def parallel_sizes(engine_args: Sequence[str]) -> tuple[int | None, int | None]:
    """(tensor-parallel, pipeline-parallel) size named in vLLM or SGLang arguments."""
    return _flag_value(engine_args, _TP), _flag_value(engine_args, _PP)


def _bandwidth(r: Roofline) -> tuple[float, str, dict[str, Any]] | str:
    if r.bandwidth_gb_s is not None:
        return r.bandwidth_gb_s, "given (plan roofline.bandwidth_gb_s)", {}
    if not r.gpu:
        return "no GPU model given for the container (roofline.gpu, from its cards)"
    product = gpu_catalogue.find(r.gpu)
    if product is None:
        return f"GPU {r.gpu!r} is not in the GPU catalogue (module_utils/gpu_catalogue.py)"
    tp_args, pp_args = parallel_sizes(r.engine_args)
    tp = r.tp_size or tp_args or 1
    pp = r.pp_size or pp_args or 1
    cards = tp * pp
    if r.gpu_count is not None and cards > r.gpu_count:
        return (
            f"tensor x pipeline parallel size {tp} x {pp} needs {cards} cards, "
            f"the container has {r.gpu_count}"
        )
    extra = {"gpu": product.name, "cards": cards, "gpu_count": r.gpu_count,
             "per_card_gb_s": product.bandwidth_gb_s}  # fmt: skip
    source = f"{cards} x {product.bandwidth_gb_s:g} GB/s ({product.bandwidth_source})"
    return product.bandwidth_gb_s * cards, source, extra


def _bytes(r: Roofline) -> tuple[float, str] | str:
    if r.bytes_per_token is not None:
        return r.bytes_per_token, r.bytes_source or "given (plan roofline.bytes_per_token)"
    w = r.weights or {}
    value = w.get("bytes_per_token")
    if not isinstance(value, int | float) or value <= 0:
        return "the model's bytes per token are not known (no weights read, no override)"
    moe = ""
    if w.get("num_experts"):
        moe = f", {w.get('experts_per_token')} of {w['num_experts']} experts active"
    return float(value), (
        f"model weights in {w.get('model_dir', '?')} ({w.get('shards', '?')} safetensors "
        f"file(s), {w.get('total_bytes', 0) / 1e9:.3g} GB stored{moe})"
    )


def resolve(section: Roofline | Mapping[str, Any] | None) -> Hardware | str:
    """The roofline's inputs, or why there is none (a sentence for the report)."""
    if section is None:
        return "no roofline inputs in the plan (no GPU model or bandwidth given)"
    if isinstance(section, Mapping):
        fields = set(Roofline.__dataclass_fields__)
        data = {k: v for k, v in section.items() if k in fields}
        data["engine_args"] = tuple(str(a) for a in data.get("engine_args") or ())
        section = Roofline(**data)
    if section.unknown:
        return section.unknown
    bandwidth = _bandwidth(section)
    if isinstance(bandwidth, str):
        return bandwidth
    size = _bytes(section)
    if isinstance(size, str):
        return size
    gb_s, b_source, extra = bandwidth
    per_token, t_source = size
    return Hardware(gb_s, per_token, b_source, t_source, **extra)


@dataclass(frozen=True)
class RooflineRow:
    context_tokens: int
    achieved_tok_s: float  # median per-request decode tok/s at concurrency 1
    acceptance_length: float  # tau (1.0 when the cell has no acceptance data)
    roofline_tok_s: float  # bandwidth / bytes_per_token
    bound_tok_s: float  # roofline * tau
    percent_of_bound: float


def roofline_rows(
    results: Results, bandwidth_gb_s: float, bytes_per_token: float
) -> list[RooflineRow]:
    """One row per context length that has a concurrency-1 cell with decode data."""
    if bandwidth_gb_s <= 0 or bytes_per_token <= 0:
        raise ValueError("bandwidth and bytes per token must be > 0")
    base = bandwidth_gb_s * 1e9 / bytes_per_token
    rows: list[RooflineRow] = []
    for cell in results.cells:
        if cell.concurrency != 1 or cell.stats.decode_tok_s.p50 is None:
            continue
        tau = cell.acceptance.mean_acceptance_length or 1.0
        bound = base * tau
        achieved = cell.stats.decode_tok_s.p50
        rows.append(
            RooflineRow(
                context_tokens=cell.context_tokens,
                achieved_tok_s=achieved,
                acceptance_length=tau,
                roofline_tok_s=base,
                bound_tok_s=bound,
                percent_of_bound=100.0 * achieved / bound,
            )
        )
    return rows
