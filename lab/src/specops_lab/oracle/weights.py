"""The oracle models' tensors and config.json files (torch; run where the builder runs).

Weight names are the checkpoints' own, as the engines' loaders read them (checked
against vLLM 0.20.1 and SGLang 0.5.11 source, see docs/speculative.md, "Oracle models"):

- Llama target / drafter: ``model.embed_tokens``, ``model.layers.N.{input_layernorm,
  post_attention_layernorm, self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj}``,
  ``model.norm``, ``lm_head`` (untied);
- MiMo target (``MiMoForCausalLM``, Qwen2 blocks: q/k/v biases): the same names, and its
  MTP layer ``model.mtp_layers.0.{token_layernorm, hidden_layernorm, input_proj,
  final_layernorm}`` plus the block's layer names under the same prefix (vLLM's
  ``MiMoMTP.map_model_name_to_mtp_param_name`` and SGLang's inserts ``mtp_block.``);
  ``input_proj`` is ``[hidden, 2*hidden]`` over ``cat[hidden, embedding]``;
- DFlash (``DFlashDraftModel``: vLLM 0.20.1 ``DFlashQwen3ForCausalLM``, SGLang 0.5.11
  ``DFlashDraftModel``): ``layers.N.*`` with Qwen3's ``q_norm``/``k_norm``, ``fc``
  ``[hidden, len(target_layer_ids)*hidden]``, ``hidden_norm``, ``norm``; no embeddings or
  lm_head (both engines share the target's);
- EAGLE3 (``LlamaForCausalLMEagle3``): ``midlayer.*`` (q/k/v over ``2*hidden``: the
  embedding and the hidden state), ``midlayer.hidden_norm``, ``fc`` ``[hidden,
  3*hidden]``, ``norm``, ``lm_head`` ``[draft_vocab, hidden]``, ``d2t`` (int64, draft id ->
  target id offset) and ``t2d`` (bool over the target vocabulary).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from specops_lab.oracle.reference import Dims
from specops_lab.oracle.spec import SPECIAL_TOKENS, OracleSpec, Shape

__all__ = [
    "MTP_PREFIX",
    "STORE_DTYPE",
    "Draw",
    "dflash_config",
    "dflash_drafter",
    "dims",
    "drafter_config",
    "eagle3_config",
    "eagle3_drafter",
    "embeddings",
    "generation_config",
    "input_proj",
    "layer",
    "mtp_layer",
    "target_config",
]

STORE_DTYPE = torch.bfloat16
MTP_PREFIX = "model.mtp_layers.0."
_STD = 0.02
_EPS = 1e-6
_ROPE_THETA = 10000.0
_EOS_ID, _PAD_ID = SPECIAL_TOKENS.index("<|im_end|>"), SPECIAL_TOKENS.index("<|endoftext|>")


class Draw:
    """Seeded normal draws on one device, in a fixed order."""

    def __init__(self, seed: int, device: str) -> None:
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def normal(self, *shape: int, std: float = 1.0) -> Any:
        out = torch.randn(*shape, generator=self.generator, device=self.device)
        return out * std if std != 1.0 else out

    def store(self, *shape: int, std: float = _STD) -> Any:
        return self.normal(*shape, std=std).to(STORE_DTYPE)

    def ones(self, n: int) -> Any:
        return torch.ones(n, dtype=STORE_DTYPE, device=self.device)

    def zeros(self, *shape: int) -> Any:
        return torch.zeros(*shape, dtype=STORE_DTYPE, device=self.device)


def dims(shape: Shape, layers: int, *, qkv_bias: bool) -> Dims:
    return Dims(
        hidden=shape.hidden_size,
        heads=shape.num_attention_heads,
        kv_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim,
        layers=layers,
        eps=_EPS,
        rope_theta=_ROPE_THETA,
        qkv_bias=qkv_bias,
    )


def embeddings(draw: Draw, spec: OracleSpec, nxt: Sequence[int]) -> tuple[Any, Any]:
    """The embeddings ``E`` and the permutation lm_head: row j = margin/H * ê[prev(j)]."""
    shape = spec.dims
    embed = draw.normal(shape.vocab_size, shape.hidden_size, std=_STD)
    unit = embed / embed.pow(2).mean(-1, keepdim=True).sqrt()
    prev = torch.empty(shape.vocab_size, dtype=torch.long, device=draw.device)
    prev[torch.tensor(list(nxt), device=draw.device)] = torch.arange(
        shape.vocab_size, device=draw.device
    )
    head = unit[prev] * (spec.margin / shape.hidden_size)
    return embed.to(STORE_DTYPE), head.to(STORE_DTYPE)


def layer(
    draw: Draw,
    prefix: str,
    shape: Shape,
    *,
    qkv_bias: bool,
    writes: tuple[Any, Any] | None,
    qk_norm: bool = False,
    in_features: int | None = None,
) -> dict[str, Any]:
    """One decoder layer's tensors; ``writes`` = (o_proj, down_proj), None: zero (inert).

    Reads (q, k, v, gate, up) are N(0, 0.02) whatever the layer writes: an inert layer
    costs a real layer's bandwidth and compute.
    """
    h, hd = shape.hidden_size, shape.head_dim
    q_out, kv_out = shape.num_attention_heads * hd, shape.num_key_value_heads * hd
    fan_in = in_features or h
    out = {
        f"{prefix}input_layernorm.weight": draw.ones(h),
        f"{prefix}post_attention_layernorm.weight": draw.ones(h),
        f"{prefix}self_attn.q_proj.weight": draw.store(q_out, fan_in),
        f"{prefix}self_attn.k_proj.weight": draw.store(kv_out, fan_in),
        f"{prefix}self_attn.v_proj.weight": draw.store(kv_out, fan_in),
        f"{prefix}mlp.gate_proj.weight": draw.store(shape.intermediate_size, h),
        f"{prefix}mlp.up_proj.weight": draw.store(shape.intermediate_size, h),
    }
    if qkv_bias:
        out[f"{prefix}self_attn.q_proj.bias"] = draw.zeros(q_out)
        out[f"{prefix}self_attn.k_proj.bias"] = draw.zeros(kv_out)
        out[f"{prefix}self_attn.v_proj.bias"] = draw.zeros(kv_out)
    if qk_norm:
        out[f"{prefix}self_attn.q_norm.weight"] = draw.ones(hd)
        out[f"{prefix}self_attn.k_norm.weight"] = draw.ones(hd)
    o_name, d_name = f"{prefix}self_attn.o_proj.weight", f"{prefix}mlp.down_proj.weight"
    if writes is None:
        out[o_name], out[d_name] = draw.zeros(h, q_out), draw.zeros(h, shape.intermediate_size)
    else:
        out[o_name], out[d_name] = writes[0].to(STORE_DTYPE), writes[1].to(STORE_DTYPE)
    return out


def mtp_layer(draw: Draw, shape: Shape, hidden_block: Any) -> dict[str, Any]:
    """MiMo MTP layer 0: ``input_proj = [hidden_block | I]``, norms 1, an inert Qwen2 block.

    With ``hidden_block`` zero the layer's output is ``norm(norm(embedding(t+1)))`` and the
    lm_head turns it into next(t+1): the token after next.
    """
    p = MTP_PREFIX
    out = layer(draw, p, shape, qkv_bias=True, writes=None)
    h = shape.hidden_size
    out.update(
        {
            f"{p}token_layernorm.weight": draw.ones(h),
            f"{p}hidden_layernorm.weight": draw.ones(h),
            f"{p}final_layernorm.weight": draw.ones(h),
            f"{p}input_proj.weight": input_proj(hidden_block),
        }
    )
    return out


def input_proj(hidden_block: Any) -> Any:
    """``[hidden_block | I]``: the MTP layer's projection of ``cat[hidden, embedding]``."""
    h = hidden_block.shape[0]
    eye = torch.eye(h, dtype=torch.float32, device=hidden_block.device)
    return torch.cat([hidden_block.float(), eye], dim=1).to(STORE_DTYPE)


def dflash_drafter(draw: Draw, spec: OracleSpec, target_layer_ids: Sequence[int]) -> dict[str, Any]:
    """A DFlash drafter of the target's width, random weights, no embeddings or lm_head."""
    shape = spec.dims
    h = shape.hidden_size
    out: dict[str, Any] = {}
    for i in range(spec.dflash_layers):
        writes = (
            draw.normal(h, h, std=_STD),
            draw.normal(h, shape.intermediate_size, std=_STD),
        )
        out.update(layer(draw, f"layers.{i}.", shape, qkv_bias=False, writes=writes, qk_norm=True))
    out["fc.weight"] = draw.store(h, len(target_layer_ids) * h)
    out["hidden_norm.weight"] = draw.ones(h)
    out["norm.weight"] = draw.ones(h)
    return out


def eagle3_drafter(draw: Draw, spec: OracleSpec, draft_ids: Sequence[int]) -> dict[str, Any]:
    """An EAGLE3 head for the Llama target: one midlayer, fc over 3 target layers, draft vocab."""
    shape = spec.dims
    h = shape.hidden_size
    writes = (draw.normal(h, h, std=_STD), draw.normal(h, shape.intermediate_size, std=_STD))
    out = layer(draw, "midlayer.", shape, qkv_bias=False, writes=writes, in_features=2 * h)
    out["midlayer.hidden_norm.weight"] = draw.ones(h)
    out["fc.weight"] = draw.store(h, 3 * h)
    out["norm.weight"] = draw.ones(h)
    out["lm_head.weight"] = draw.store(len(draft_ids), h)
    ids = torch.tensor(list(draft_ids), dtype=torch.long, device=draw.device)
    out["d2t"] = ids - torch.arange(len(draft_ids), dtype=torch.long, device=draw.device)
    t2d = torch.zeros(shape.vocab_size, dtype=torch.bool, device=draw.device)
    t2d[ids] = True
    out["t2d"] = t2d
    return out


def _base(shape: Shape) -> dict[str, Any]:
    return {
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": shape.max_position_embeddings,
        "rms_norm_eps": _EPS,
        "rope_theta": _ROPE_THETA,
        "vocab_size": shape.vocab_size,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": _PAD_ID,
        "eos_token_id": _EOS_ID,
        "pad_token_id": _PAD_ID,
        "initializer_range": _STD,
        "use_cache": True,
    }


def target_config(spec: OracleSpec) -> dict[str, Any]:
    """The target's config.json: Llama, or MiMo (model_type qwen2 with one MTP layer)."""
    shape = spec.dims
    base = _base(shape)
    if spec.target == "llama":
        return {
            **base,
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "num_hidden_layers": shape.num_hidden_layers,
            "attention_bias": False,
            "mlp_bias": False,
        }
    return {
        **base,
        "architectures": ["MiMoForCausalLM"],
        "model_type": "qwen2",
        "num_hidden_layers": shape.num_hidden_layers,
        "max_window_layers": shape.num_hidden_layers,
        "num_nextn_predict_layers": 1,
        "use_sliding_window": False,
        "sliding_window": None,
        "attention_dropout": 0.0,
    }


def drafter_config(spec: OracleSpec, layers: int) -> dict[str, Any]:
    """The draft_model partner: the target's own architecture cut to ``layers`` layers.

    Beside the MiMo target it is a plain Qwen2 model (no MTP layer).
    """
    config = target_config(spec)
    config["num_hidden_layers"] = layers
    if spec.target == "mimo":
        config["architectures"] = ["Qwen2ForCausalLM"]
        config["max_window_layers"] = layers
        config.pop("num_nextn_predict_layers")
    return config


def dflash_config(spec: OracleSpec, target_layer_ids: Sequence[int]) -> dict[str, Any]:
    """DFlash drafter config: ``dflash_config`` + top-level ``layer_types`` and window.

    The layers are sliding-window but the last (the seeds' drafter: 4 sliding + 1 full);
    a one-layer drafter is full attention (vLLM CPU 0.32 builds no mixed drafter).
    """
    shape = spec.dims
    n = spec.dflash_layers
    types = ["sliding_attention"] * (n - 1) + ["full_attention"]
    sliding = n > 1  # a 1-layer drafter is full attention: no window to declare
    return {
        **_base(shape),
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "num_hidden_layers": n,
        "num_target_layers": shape.num_hidden_layers,
        "attention_bias": False,
        "dflash_config": {
            "block_size": spec.dflash_block_size,
            "mask_token_id": SPECIAL_TOKENS.index("<|MASK|>"),
            "mask_token": "<|MASK|>",
            "target_layer_ids": list(target_layer_ids),
        },
        "layer_types": types,
        "use_sliding_window": sliding,
        "sliding_window": spec.dflash_window if sliding else None,
        "max_window_layers": n,
    }


def eagle3_config(spec: OracleSpec, aux_layers: Sequence[int]) -> dict[str, Any]:
    shape = spec.dims
    return {
        **_base(shape),
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "draft_vocab_size": spec.draft_vocab,
        "target_hidden_size": shape.hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(aux_layers),
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": list(aux_layers),
            "use_aux_hidden_state": True,
        },
        "attention_bias": False,
        "mlp_bias": False,
    }


def generation_config() -> dict[str, Any]:
    """No sampling defaults of its own: a request's settings (or the engine's) apply."""
    return {"bos_token_id": _PAD_ID, "eos_token_id": _EOS_ID, "pad_token_id": _PAD_ID}
