"""Bytes a decode step reads from a model's weights, from its safetensors files.

A decode step (one token of one sequence, or one verify step of speculative decoding)
reads every weight the forward pass uses once. That is the roofline's "bytes per
token". Read from the files themselves, so any dtype or quantization counts as stored:

- every tensor's size comes from the safetensors headers (8-byte length, JSON header:
  ``data_offsets``), shard by shard as ``model.safetensors.index.json`` lists them (or
  every ``*.safetensors`` of the directory); no tensor data is read;
- mixture of experts: tensors under ``.experts.`` hold all routed experts; a token uses
  ``num_experts_per_tok`` of ``num_experts`` (``num_local_experts``,
  ``n_routed_experts``) from ``config.json`` (or its ``text_config``), so only that
  share of them counts (shared experts always count);
- left out: the input embedding when the output head is a separate tensor (a step
  reads one row of it), vision/audio towers (not part of text decode) and MTP layers
  (a drafter's weights, not the target's).

Stdlib only: this runs on managed hosts (the serving container), down to Python 3.7.
"""

from __future__ import annotations

import json
import os
import re
import struct
from typing import Any

__all__ = ["ModelWeightsError", "read_weights"]

_EXPERTS = re.compile(r"\.experts\.")
_NOT_TEXT = re.compile(
    r"(^|\.)(visual|vision_tower|vision_model|vision_encoder|audio_tower|multi_modal_projector)\."
)
_MTP = re.compile(r"(^|\.)mtp\.")
_EMBED = re.compile(r"(embed_tokens|wte|word_embeddings)\.weight$")
_HEAD = re.compile(r"(^|\.)lm_head\.weight$")
_HEADER_LIMIT = 100 * 1024 * 1024  # safetensors' own bound on a header


class ModelWeightsError(Exception):
    """The directory holds no readable safetensors weights; the message says why."""


def _header(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise ModelWeightsError(f"{path}: shorter than a safetensors header")
            (length,) = struct.unpack("<Q", raw)
            if length > _HEADER_LIMIT:
                raise ModelWeightsError(f"{path}: header of {length} bytes is not safetensors")
            data = fh.read(length)
    except OSError as exc:
        raise ModelWeightsError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        header = json.loads(data)
    except ValueError:
        raise ModelWeightsError(f"{path}: the header is not JSON") from None
    if not isinstance(header, dict):
        raise ModelWeightsError(f"{path}: the header is not a mapping")
    return header


def _shards(model_dir: str) -> list[str]:
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as fh:
                weight_map = json.load(fh).get("weight_map") or {}
        except (OSError, ValueError) as exc:
            raise ModelWeightsError(f"cannot read {index}: {exc}") from None
        return sorted({os.path.join(model_dir, str(f)) for f in weight_map.values()})
    try:
        names = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    except OSError as exc:
        raise ModelWeightsError(f"cannot list {model_dir}: {exc.strerror or exc}") from None
    return [os.path.join(model_dir, n) for n in names]


def _config(model_dir: str) -> dict[str, Any]:
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ModelWeightsError(f"cannot read {path}: {exc}") from None
    if not isinstance(config, dict):
        return {}
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def _first_int(config: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def read_weights(model_dir: str) -> dict[str, Any]:
    """What one decode step reads, in bytes, with every part it was made of."""
    if not os.path.isdir(model_dir):
        raise ModelWeightsError(f"{model_dir} is not a directory")
    shards = _shards(model_dir)
    if not shards:
        raise ModelWeightsError(f"{model_dir} holds no *.safetensors files")
    parts = {"total": 0, "experts": 0, "embedding": 0, "head": 0, "not_text": 0, "mtp": 0}
    tensors = 0
    for shard in shards:
        for name, info in _header(shard).items():
            if name == "__metadata__" or not isinstance(info, dict):
                continue
            offsets = info.get("data_offsets")
            if not (isinstance(offsets, list) and len(offsets) == 2):
                raise ModelWeightsError(f"{shard}: tensor {name} has no data_offsets")
            size = int(offsets[1]) - int(offsets[0])
            tensors += 1
            parts["total"] += size
            if _NOT_TEXT.search(name):
                parts["not_text"] += size
            elif _MTP.search(name):
                parts["mtp"] += size
            elif _EXPERTS.search(name):
                parts["experts"] += size
            elif _EMBED.search(name):
                parts["embedding"] += size
            elif _HEAD.search(name):
                parts["head"] += size
    config = _config(model_dir)
    experts = _first_int(config, ("num_experts", "num_local_experts", "n_routed_experts"))
    per_token = _first_int(config, ("num_experts_per_tok", "num_experts_per_token", "moe_top_k"))
    active_experts = parts["experts"]
    if parts["experts"] and experts and per_token:
        active_experts = parts["experts"] * min(per_token, experts) // experts
    # A separate output head: the input embedding is only indexed (one row per token).
    embedding = parts["embedding"] if not parts["head"] else 0
    per_step = (
        parts["total"]
        - parts["not_text"]
        - parts["mtp"]
        - parts["experts"]
        + active_experts
        - parts["embedding"]
        + embedding
    )
    return {
        "model_dir": model_dir,
        "shards": len(shards),
        "tensors": tensors,
        "total_bytes": parts["total"],
        "expert_bytes": parts["experts"],
        "active_expert_bytes": active_experts,
        "num_experts": experts,
        "experts_per_token": per_token,
        "input_embedding_bytes": parts["embedding"],
        "output_head_bytes": parts["head"],
        "left_out_bytes": parts["not_text"] + parts["mtp"] + parts["embedding"] - embedding,
        "bytes_per_token": per_step,
    }
