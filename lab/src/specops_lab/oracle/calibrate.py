"""Measurements on the built tensors: the live layers' scale and the noise knob.

All in torch with :mod:`specops_lab.oracle.reference`, in the dtype the engine will
compute in (``OracleSpec.calibration_dtype``):

- :func:`scale_live_layers`: the Llama target's first ``live_layers`` layers write
  ``live_ratio`` of the embedding's RMS per branch (measured on a batch, layer by
  layer), small enough that the permutation lm_head still decides the next token;
- :func:`acceptance`: per-position acceptance of a chain drafter (one that proposes
  next(x), as the clean drafter and the oracle MTP layer do) against a target's own
  greedy output: position k counts the steps whose first k drafts all matched;
- :func:`calibrate`: relative noise scales doubling until acceptance falls below
  ``noise_alpha``, then bisection in log scale; the point measured nearest the target
  is the pick. Every point it measured is kept in the build record.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from specops_lab.oracle import reference
from specops_lab.oracle.reference import Dims

__all__ = [
    "Calibration",
    "acceptance",
    "calibrate",
    "mtp_acceptance",
    "prompts",
    "rms",
    "scale_live_layers",
]

_GRID: tuple[float, ...] = (0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
_DEPTH = 5


@dataclass
class Calibration:
    """A noise calibration: grid (relative scale -> per-position acceptance) and the pick."""

    target_alpha: float
    grid: dict[str, list[float]] = field(default_factory=dict)
    relative_scale: float = 0.0
    per_position: list[float] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def rms(x: Any) -> float:
    return float(x.float().pow(2).mean().sqrt())


def prompts(vocab: int, *, specials: int, batch: int, length: int, device: str, seed: int) -> Any:
    """Random non-special token ids ``[batch, length]``."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    return torch.randint(specials, vocab, (batch, length), generator=gen).to(device)


def scale_live_layers(
    w: dict[str, Any],
    dims: Dims,
    units: Sequence[tuple[Any, Any]],
    *,
    ratio: float,
    batch: Any,
    dtype: Any,
    store: Any,
) -> list[dict[str, float]]:
    """Set live layer i's o_proj / down_proj to ``scale * units[i]`` so that each branch
    writes ``ratio`` of the embedding's RMS on ``batch``; returns the scales and RMS."""
    x = w["model.embed_tokens.weight"].to(dtype)[batch]
    base = rms(x)
    positions = torch.arange(batch.shape[1], device=batch.device)
    out = []
    for i, (o_unit, d_unit) in enumerate(units):
        p = f"model.layers.{i}."
        w[f"{p}self_attn.o_proj.weight"] = o_unit.to(store)
        w[f"{p}mlp.down_proj.weight"] = torch.zeros_like(d_unit, dtype=store)
        attn, _mlp = reference.decoder_layer(x, w, p, dims, dtype=dtype, positions=positions)
        s_o = ratio * base / max(rms(attn), 1e-30)
        w[f"{p}self_attn.o_proj.weight"] = (o_unit * s_o).to(store)
        w[f"{p}mlp.down_proj.weight"] = d_unit.to(store)
        _attn, mlp = reference.decoder_layer(x, w, p, dims, dtype=dtype, positions=positions)
        s_d = ratio * base / max(rms(mlp), 1e-30)
        w[f"{p}mlp.down_proj.weight"] = (d_unit * s_d).to(store)
        attn, mlp = reference.decoder_layer(x, w, p, dims, dtype=dtype, positions=positions)
        x = x + attn + mlp
        out.append({"o_scale": s_o, "down_scale": s_d, "attn_rms": rms(attn), "mlp_rms": rms(mlp),
                    "embedding_rms": base})  # fmt: skip
    return out


def _follow(tokens: Any, last: Any, nxt: Any) -> Any:
    prev = torch.cat([last[:, None], tokens[:, :-1]], dim=1)
    return tokens == nxt[prev]


def _per_position(follow: Any, depth: int) -> list[float]:
    steps = follow.shape[1]
    out = []
    run = torch.ones_like(follow[:, : steps - depth + 1])
    for k in range(depth):
        run = run & follow[:, k : steps - depth + 1 + k]
        out.append(round(float(run.float().mean()), 4))
    return out


def acceptance(
    w: Mapping[str, Any],
    dims: Dims,
    batch: Any,
    *,
    steps: int,
    nxt: Any,
    dtype: Any,
    depth: int = _DEPTH,
) -> list[float]:
    """Per-position acceptance of a chain drafter against the target's greedy output."""
    tokens = reference.greedy(w, dims, batch, steps=steps, dtype=dtype)
    return _per_position(_follow(tokens, batch[:, -1], nxt), depth)


def mtp_acceptance(
    w: Mapping[str, Any], dims: Dims, starts: Any, *, nxt: Any, dtype: Any, depth: int = _DEPTH
) -> list[float]:
    """Per-position acceptance of the MTP layer run ``depth`` times from each start token.

    The target (all layers inert) emits next(x) with hidden ``norm(embedding(x))``; step 1
    feeds that hidden and next(x), later steps the MTP's own output and prediction, as
    vLLM does when it reuses the one layer for k > 1. A draft is right when it is the
    token after the one it was fed.
    """
    w = reference.cast(w, dtype)
    embed = w["model.embed_tokens.weight"]
    head = w["lm_head.weight"]
    hidden = reference.rms_norm(embed[starts], w["model.norm.weight"], dims.eps)[:, None, :]
    token = nxt[starts]
    positions = torch.ones(1, dtype=torch.long, device=starts.device)
    ok = torch.ones_like(starts, dtype=torch.bool)
    out = []
    for _ in range(depth):
        hidden = reference.mtp_hidden(
            w, dims, hidden, token[:, None], dtype=dtype, positions=positions
        )
        pred = (hidden[:, 0] @ head.T).float().argmax(-1)
        ok = ok & (pred == nxt[token])
        out.append(round(float(ok.float().mean()), 4))
        token = pred
    return out


def calibrate(
    measure: Callable[[float], list[float]], target_alpha: float, note: str, refine: int = 4
) -> Calibration:
    """Find the relative noise scale whose first-position acceptance is ``target_alpha``.

    The grid doubles the scale until acceptance falls below the target, then ``refine``
    bisections in log scale narrow the bracket; the point measured nearest the target
    is the pick (its measurement is the one recorded).
    """
    cal = Calibration(target_alpha=target_alpha, note=note)
    points: dict[float, list[float]] = {}

    def at(scale: float) -> float:
        points[scale] = measure(scale)
        cal.grid[f"{scale:.6g}"] = points[scale]
        return points[scale][0]

    low: float | None = None
    high: float | None = None
    for scale in _GRID:
        if at(scale) >= target_alpha:
            low = scale
        else:
            high = scale
            break
    if low is not None and high is not None:
        for _ in range(refine):
            mid = math.sqrt(low * high)
            if at(mid) >= target_alpha:
                low = mid
            else:
                high = mid
    pick = min(points, key=lambda s: abs(points[s][0] - target_alpha))
    cal.relative_scale = pick
    cal.per_position = points[pick]
    return cal
