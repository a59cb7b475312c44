"""A reference forward pass in plain torch: Llama/Qwen2 decoder layers and MiMo's MTP layer.

What the engines compute, written out so the oracle can be checked and calibrated
without transformers (the accelerator machine may not have a matching one): RMSNorm,
rotary embeddings (NeoX layout, as Llama and Qwen2 checkpoints use), grouped-query
causal attention, SwiGLU MLP; the MTP layer as vLLM 0.20.1's ``MiMoMultiTokenPredictorLayer``
and SGLang 0.5.11's ``MiMoMultiTokenPredictorLayer`` run it (``input_proj`` over
``cat[hidden_layernorm(h), token_layernorm(embedding)]``, a Qwen2 block, its residual,
``final_layernorm``). Greedy decoding keeps a KV cache per layer; a whole-sequence pass
gives every position's logits. Weights are read by their checkpoint names from a
mapping of tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Dims", "cast", "decoder_layer", "forward", "greedy", "mtp_hidden", "rms_norm"]


@dataclass(frozen=True)
class Dims:
    """What the forward pass needs to know about a model."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    eps: float
    rope_theta: float
    qkv_bias: bool = False


def rms_norm(x: Any, weight: Any, eps: float) -> Any:
    """RMSNorm in float32, returned in ``x``'s dtype."""
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)


def _rope(x: Any, positions: Any, theta: float) -> Any:
    """Rotary embedding, NeoX layout (rotate_half), on ``[B, T, heads, head_dim]``."""
    dim = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    freqs = positions.float()[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    x32 = x.float()
    half = dim // 2
    rotated = torch.cat([-x32[..., half:], x32[..., :half]], dim=-1)
    return (x32 * cos + rotated * sin).to(x.dtype)


def _linear(x: Any, w: Mapping[str, Any], name: str, dtype: Any) -> Any:
    out = x @ w[f"{name}.weight"].to(dtype).T
    bias = w.get(f"{name}.bias")
    return out + bias.to(dtype) if bias is not None else out


def decoder_layer(
    x: Any,
    w: Mapping[str, Any],
    prefix: str,
    dims: Dims,
    *,
    dtype: Any,
    positions: Any,
    cache: dict[str, Any] | None = None,
) -> tuple[Any, Any]:
    """One decoder layer on the residual ``x`` ``[B, T, H]``: its two branches' outputs.

    The layer's output is ``x + attn`` then ``+ mlp``; they are returned apart so the
    builder can measure what each branch writes. ``cache`` (a dict per layer, empty at
    first) keeps the keys and values of earlier calls: ``x`` then holds the new
    positions only.
    """
    b, t, _ = x.shape
    n = rms_norm(x, w[f"{prefix}input_layernorm.weight"], dims.eps)
    q = _linear(n, w, f"{prefix}self_attn.q_proj", dtype).view(b, t, dims.heads, dims.head_dim)
    k = _linear(n, w, f"{prefix}self_attn.k_proj", dtype).view(b, t, dims.kv_heads, dims.head_dim)
    v = _linear(n, w, f"{prefix}self_attn.v_proj", dtype).view(b, t, dims.kv_heads, dims.head_dim)
    q, k = _rope(q, positions, dims.rope_theta), _rope(k, positions, dims.rope_theta)
    if cache is not None:
        if cache:
            k, v = torch.cat([cache["k"], k], dim=1), torch.cat([cache["v"], v], dim=1)
        cache["k"], cache["v"] = k, v
    rep = dims.heads // dims.kv_heads
    k = k.repeat_interleave(rep, dim=2)
    v = v.repeat_interleave(rep, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) / dims.head_dim**0.5
    keys = torch.arange(k.shape[1], device=x.device)
    mask = keys[None, :] > positions[:, None]
    probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
    ctx = torch.einsum("bhqk,bkhd->bqhd", probs, v.float()).to(dtype).reshape(b, t, -1)
    attn = _linear(ctx, w, f"{prefix}self_attn.o_proj", dtype)
    h = x + attn
    n2 = rms_norm(h, w[f"{prefix}post_attention_layernorm.weight"], dims.eps)
    gate = _linear(n2, w, f"{prefix}mlp.gate_proj", dtype)
    up = _linear(n2, w, f"{prefix}mlp.up_proj", dtype)
    mlp = _linear(torch.nn.functional.silu(gate) * up, w, f"{prefix}mlp.down_proj", dtype)
    return attn, mlp


def forward(
    w: Mapping[str, Any],
    dims: Dims,
    input_ids: Any,
    dtype: Any,
    *,
    layers: int | None = None,
    last: bool = False,
    cache: list[dict[str, Any]] | None = None,
) -> tuple[Any, Any]:
    """The final hidden state (after the final norm) and the logits, ``[B, T, ...]``.

    ``layers``: run only the first so many decoder layers (a drafter made of them);
    ``last``: logits of the last position only (``[B, 1, vocab]``); ``cache``: one dict
    per layer (see :func:`decoder_layer`), ``input_ids`` then the new tokens only.
    """
    x = w["model.embed_tokens.weight"].to(dtype)[input_ids]
    start = cache[0]["k"].shape[1] if cache and cache[0] else 0
    positions = torch.arange(start, start + input_ids.shape[1], device=input_ids.device)
    for i in range(dims.layers if layers is None else layers):
        layer_cache = cache[i] if cache is not None else None
        attn, mlp = decoder_layer(
            x, w, f"model.layers.{i}.", dims, dtype=dtype, positions=positions, cache=layer_cache
        )
        x = x + attn + mlp
    hidden = rms_norm(x, w["model.norm.weight"], dims.eps)
    return hidden, (hidden[:, -1:] if last else hidden) @ w["lm_head.weight"].to(dtype).T


def mtp_hidden(
    w: Mapping[str, Any], dims: Dims, hidden: Any, next_ids: Any, *, dtype: Any, positions: Any
) -> Any:
    """MiMo's MTP layer 0: from the target's hidden at t and token t+1's id, its output at t.

    As the engines run it: the embedding at position 0 is zeroed, ``input_proj`` over
    ``cat[hidden_layernorm(h), token_layernorm(e)]``, the Qwen2 block with its residual,
    ``final_layernorm``. Logits are ``output @ lm_head.T``.
    """
    p = "model.mtp_layers.0."
    e = w["model.embed_tokens.weight"].to(dtype)[next_ids]
    e = e.masked_fill((positions == 0)[None, :, None], 0.0)
    z = (
        torch.cat(
            [
                rms_norm(hidden, w[f"{p}hidden_layernorm.weight"], dims.eps),
                rms_norm(e, w[f"{p}token_layernorm.weight"], dims.eps),
            ],
            dim=-1,
        )
        @ w[f"{p}input_proj.weight"].to(dtype).T
    )
    attn, mlp = decoder_layer(z, w, p, dims, dtype=dtype, positions=positions)
    return rms_norm(z + attn + mlp, w[f"{p}final_layernorm.weight"], dims.eps)


def cast(w: Mapping[str, Any], dtype: Any) -> dict[str, Any]:
    """The tensors in ``dtype`` (floating ones), once, instead of at every use."""
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in w.items()}


def greedy(
    w: Mapping[str, Any],
    dims: Dims,
    prompts: Any,
    *,
    steps: int,
    dtype: Any,
    layers: int | None = None,
) -> Any:
    """Greedy continuation of ``prompts`` ``[B, T]`` by ``steps`` tokens (with a KV cache)."""
    w = cast(w, dtype)
    cache: list[dict[str, Any]] = [{} for _ in range(dims.layers if layers is None else layers)]
    out = []
    feed = prompts
    for _ in range(steps):
        _hidden, logits = forward(w, dims, feed, dtype, layers=layers, last=True, cache=cache)
        feed = logits[:, -1].float().argmax(-1, keepdim=True)
        out.append(feed)
    return torch.cat(out, dim=1)
