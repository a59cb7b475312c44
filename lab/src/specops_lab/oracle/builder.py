"""Build an oracle target and its speculative partners into one folder (torch).

Runs where torch, safetensors and tokenizers are (the lab's vLLM venv here, the
accelerator machine's python there); nothing is downloaded and transformers is not
needed. ``python -m specops_lab.oracle build ...`` (:mod:`specops_lab.oracle.__main__`)
calls :func:`build`; ``specops lab oracle build`` runs that in the lab's venv.

The output folder::

    specops-oracle.json      the record: spec, dims, calibration, checks, file digests
    oracle-next.json         next[x] for every token id (the target's permutation)
    target/                  the target (LlamaForCausalLM or MiMoForCausalLM)
    target-noisy/            the noisy partner, when noise_alpha is set
    drafter/                 draft_model partner (draft_model and mtp families)
    dflash/  eagle3/         those families' drafters

Each model folder holds config.json, generation_config.json, the tokenizer files,
``model.safetensors.index.json`` and its shards. A shard several models use (the
embeddings, the shared layers) is written once and hard-linked into each folder, so the
noisy target costs only its noisy tensors. Shards never hold tensors a folder's model
does not have (the engines load every tensor of a listed file).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from specops_lab.oracle import calibrate, reference, tokenizer, weights
from specops_lab.oracle.reference import Dims
from specops_lab.oracle.selfcheck import CheckFailed, check_build
from specops_lab.oracle.spec import (
    NEXT_NAME,
    RECORD_NAME,
    SPECIAL_TOKENS,
    OracleSpec,
    expected_margin,
    folders,
    next_map,
)

__all__ = ["NEXT_NAME", "SHARD_BYTES", "build", "target_layer_ids"]

SHARD_BYTES = 4_000_000_000  # per safetensors file, as checkpoints are cut
Log = Callable[[str], None]


def target_layer_ids(num_target_layers: int, draft_layers: int) -> list[int]:
    """DFlash's default target layers: the drafter preflight's rule (one home)."""
    from ansible_collections.specops.infra.plugins.module_utils.dflash_drafter import (  # noqa: PLC0415
        default_target_layer_ids,
    )

    return default_target_layer_ids(num_target_layers, draft_layers)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _Shards:
    """Named groups of tensors written once under ``root/.shards``, split at ``limit``."""

    def __init__(self, root: Path, log: Log, limit: int = SHARD_BYTES) -> None:
        self.dir = root / ".shards"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.names: dict[str, dict[str, int]] = {}  # file -> {tensor: bytes}
        self.log = log
        self.limit = limit

    def write(self, name: str, tensors: dict[str, Any]) -> list[str]:
        """Write ``tensors`` as ``name.safetensors`` (split when large); the file names."""
        files: list[str] = []
        chunk: dict[str, Any] = {}
        size = 0
        keys = list(tensors)
        for key in keys:
            nbytes = tensors[key].numel() * tensors[key].element_size()
            if chunk and size + nbytes > self.limit:
                files.append(self._save(f"{name}-{len(files) + 1:03d}", chunk))
                chunk, size = {}, 0
            chunk[key] = tensors[key]
            size += nbytes
        if chunk:
            files.append(self._save(f"{name}-{len(files) + 1:03d}" if files else name, chunk))
        return files

    def _save(self, stem: str, tensors: dict[str, Any]) -> str:
        fname = f"{stem}.safetensors"
        save_file(
            {k: v.contiguous().cpu() for k, v in tensors.items()},
            str(self.dir / fname),
            metadata={"format": "pt"},
        )
        self.names[fname] = {k: v.numel() * v.element_size() for k, v in tensors.items()}
        total = sum(self.names[fname].values())
        self.log(f"shard {fname}: {len(tensors)} tensors, {total / 1e9:.3f} GB")
        return fname


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _folder(
    root: Path,
    name: str,
    *,
    shards: _Shards,
    files: list[str],
    config: dict[str, Any],
    tokdir: Path,
) -> dict[str, Any]:
    out = root / name
    out.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    total = 0
    for fname in files:
        _link(shards.dir / fname, out / fname)
        for key, nbytes in shards.names[fname].items():
            if key in weight_map:
                raise RuntimeError(f"{name}: tensor {key} is in two shards")
            weight_map[key] = fname
            total += nbytes
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps(weights.generation_config(), indent=2) + "\n"
    )
    for fname in tokenizer.TOKENIZER_FILES:
        _link(tokdir / fname, out / fname)
    return {
        "architecture": config["architectures"][0],
        "bytes": total,
        "tensors": len(weight_map),
        "config_sha256": _sha256(out / "config.json"),
        "shards": files,
    }


def _record_head(spec: OracleSpec, device: str) -> dict[str, Any]:
    return {
        "spec": spec.to_dict(),
        "target": spec.target,
        "dims": _dims_record(spec),
        "device": device,
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "expected_margin": round(expected_margin(spec), 3),
    }


def _digests(out: Path) -> dict[str, str]:
    """sha256 of every file the build wrote (the record aside), each inode read once."""
    seen: dict[tuple[int, int], str] = {}
    out_map: dict[str, str] = {}
    for p in sorted(out.rglob("*")):
        if not p.is_file() or p.name == RECORD_NAME:
            continue
        st = p.stat()
        key = (st.st_dev, st.st_ino)
        if key not in seen:
            seen[key] = _sha256(p)
        out_map[str(p.relative_to(out))] = seen[key]
    return out_map


def _vocabulary(spec: OracleSpec, out: Path, tokdir: Path, record: dict[str, Any]) -> list[int]:
    """The tokenizer (into ``tokdir``) and the permutation (``oracle-next.json``)."""
    shape = spec.dims
    tok, record["tokenizer"] = tokenizer.train(shape.vocab_size)
    tokenizer.write(tok, tokdir, shape.max_position_embeddings)
    nxt = next_map(shape.vocab_size, spec.cycle, spec.seed)
    (out / NEXT_NAME).write_text(json.dumps(nxt) + "\n")
    record["next_sha256"] = _sha256(out / NEXT_NAME)
    return nxt


def _dims_record(spec: OracleSpec) -> dict[str, Any]:
    shape = spec.dims
    return {
        "hidden_size": shape.hidden_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "intermediate_size": shape.intermediate_size,
        "vocab_size": shape.vocab_size,
        "params": shape.params(),
    }


@dataclass
class _Target:
    """The target's tensors in the groups its shards are cut by.

    ``first``: the drafter's layers (Llama: the live ones; MiMo: layer 0, inert);
    ``reads`` / ``zeros``: the other layers' read weights and their zero writes (the
    noisy Llama target swaps ``zeros`` for noise); ``mtp``: MiMo's MTP layer.
    """

    common: dict[str, Any]
    head: Any
    first: dict[str, Any] = field(default_factory=dict)
    reads: dict[str, Any] = field(default_factory=dict)
    zeros: dict[str, Any] = field(default_factory=dict)
    mtp: dict[str, Any] = field(default_factory=dict)
    units: list[tuple[Any, Any]] = field(default_factory=list)

    def tensors(self) -> dict[str, Any]:
        return {**self.common, "lm_head.weight": self.head, **self.first, **self.reads,
                **self.zeros, **self.mtp}  # fmt: skip


def _drafter_layers(spec: OracleSpec) -> int:
    """The drafter's layers: the live ones (Llama), or one inert layer (MiMo)."""
    return 1 if spec.target == "mimo" else spec.live_layers


def _target(spec: OracleSpec, draw: weights.Draw, nxt: list[int]) -> _Target:
    shape = spec.dims
    mimo = spec.target == "mimo"
    embed, head = weights.embeddings(draw, spec, nxt)
    common = {"model.embed_tokens.weight": embed, "model.norm.weight": draw.ones(shape.hidden_size)}
    t = _Target(common, head)
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}."
        if not mimo and i < spec.live_layers:
            unit = (draw.normal(shape.hidden_size, shape.hidden_size),
                    draw.normal(shape.hidden_size, shape.intermediate_size))  # fmt: skip
            t.units.append(unit)
            t.first.update(weights.layer(draw, p, shape, qkv_bias=False, writes=unit))
            continue
        tensors = weights.layer(draw, p, shape, qkv_bias=mimo, writes=None)
        if mimo and i == 0:
            t.first.update(tensors)
            continue
        for key, value in tensors.items():
            is_write = key.endswith(("o_proj.weight", "down_proj.weight"))
            (t.zeros if is_write else t.reads)[key] = value
    if mimo:
        zero = torch.zeros(shape.hidden_size, shape.hidden_size, device=draw.device)
        t.mtp = weights.mtp_layer(draw, shape, zero)
    return t


def _scale_live(spec: OracleSpec, t: _Target, batch: Any, dtype: Any) -> list[dict[str, float]]:
    """Scale the Llama target's live layers (in place) so its output stays the chain."""
    all_tensors = t.tensors()
    dims = weights.dims(spec.dims, spec.dims.num_hidden_layers, qkv_bias=False)
    scales = calibrate.scale_live_layers(
        all_tensors, dims, t.units, ratio=spec.live_ratio, batch=batch, dtype=dtype,
        store=weights.STORE_DTYPE,
    )  # fmt: skip
    for key in t.first:
        t.first[key] = all_tensors[key]
    return scales


def _partners(spec: OracleSpec, draw: weights.Draw) -> dict[str, tuple[dict[str, Any], Any]]:
    """DFlash and EAGLE3 drafters (random weights) with their config.json."""
    shape = spec.dims
    out: dict[str, tuple[dict[str, Any], Any]] = {}
    if "dflash" in spec.families:
        layer_ids = target_layer_ids(shape.num_hidden_layers, spec.dflash_layers)
        out["dflash"] = (weights.dflash_drafter(draw, spec, layer_ids),
                         weights.dflash_config(spec, layer_ids))  # fmt: skip
    if "eagle3" in spec.families:
        n = shape.num_hidden_layers
        aux = [2, n // 2, n - 3]  # the engines' default EAGLE3 target layers
        gen = torch.Generator(device="cpu")
        gen.manual_seed(spec.seed + 3)
        specials = len(SPECIAL_TOKENS)
        pool = torch.randperm(shape.vocab_size - specials, generator=gen)
        pick = pool[: spec.draft_vocab - specials] + specials
        draft_ids = sorted({*range(specials), *pick.tolist()})
        out["eagle3"] = (weights.eagle3_drafter(draw, spec, draft_ids),
                         weights.eagle3_config(spec, aux))  # fmt: skip
    return out


def _write(
    spec: OracleSpec,
    out: Path,
    *,
    t: _Target,
    noisy: dict[str, Any],
    partners: dict[str, tuple[dict[str, Any], Any]],
    tokdir: Path,
    log: Log,
    shard_bytes: int,
) -> dict[str, Any]:
    """Shards once, then each folder's index, configs, tokenizer and hard links."""
    shards = _Shards(out, log, shard_bytes)
    emb = shards.write("embed", t.common)
    head = shards.write("head", {"lm_head.weight": t.head})
    first = shards.write("first", t.first)
    base = emb + head + first + (shards.write("layers", t.reads) if t.reads else [])
    zeros = shards.write("inert", t.zeros) if t.zeros else []
    mimo = spec.target == "mimo"
    plan: dict[str, tuple[list[str], dict[str, Any]]] = {
        "target": (base + zeros + (shards.write("mtp", t.mtp) if mimo else []),
                   weights.target_config(spec)),
    }  # fmt: skip
    if noisy and mimo:  # the noisy MTP layer beside the same decoder layers
        plan["target-noisy"] = (base + zeros + shards.write("mtp-noisy", noisy),
                                weights.target_config(spec))  # fmt: skip
    elif noisy:  # noise in place of the inert layers' zero writes
        plan["target-noisy"] = (base + shards.write("noise", noisy), weights.target_config(spec))
    if "drafter" in folders(spec):
        plan["drafter"] = (emb + head + first, weights.drafter_config(spec, _drafter_layers(spec)))
    for name, (tensors, config) in partners.items():
        plan[name] = (shards.write(name, tensors), config)
    written = {
        name: _folder(out, name, shards=shards, files=files, config=config, tokdir=tokdir)
        for name, (files, config) in plan.items()
    }
    shutil.rmtree(shards.dir)
    return written


def build(
    spec: OracleSpec,
    out: Path,
    *,
    device: str = "cpu",
    check: bool = True,
    log: Log = print,
    shard_bytes: int = SHARD_BYTES,
) -> dict[str, Any]:
    """Build ``spec`` into ``out`` (created; must be empty) and return the record.

    The tensors are freed before the self-check, which loads the folders as written.
    """
    began = time.monotonic()
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty: build into a new folder")
    out.mkdir(parents=True, exist_ok=True)
    shape = spec.dims
    record = _record_head(spec, device)
    timings: dict[str, float] = {}

    def lap(what: str) -> None:
        timings[what] = round(time.monotonic() - began - sum(timings.values()), 2)
        log(f"[{time.monotonic() - began:7.1f} s] {what}")

    tokdir = out / ".tokenizer"
    nxt = _vocabulary(spec, out, tokdir, record)
    lap("tokenizer and permutation")

    draw = weights.Draw(spec.seed, device)
    dtype = getattr(torch, spec.calibration_dtype)
    t = _target(spec, draw, nxt)
    batch = calibrate.prompts(shape.vocab_size, specials=len(SPECIAL_TOKENS), batch=16,
                              length=32, device=device, seed=spec.seed + 1)  # fmt: skip
    if t.units:
        record["live_layers"] = _scale_live(spec, t, batch, dtype)
    lap("target tensors")
    noisy: dict[str, Any] = {}
    if spec.noise_alpha is not None and "target-noisy" in folders(spec):
        nxt_t = torch.tensor(nxt, device=device)
        noisy, record["calibration"] = _noisy(spec, draw, t.tensors(), batch=batch, nxt=nxt_t,
                                              dtype=dtype)  # fmt: skip
        lap("noise calibration")
    partners = _partners(spec, draw)
    record["folders"] = _write(spec, out, t=t, noisy=noisy, partners=partners, tokdir=tokdir,
                               log=log, shard_bytes=shard_bytes)  # fmt: skip
    shutil.rmtree(tokdir)
    del t, noisy, partners, draw, batch
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    lap("files written")

    failed: CheckFailed | None = None
    if check:
        try:
            record["checks"] = check_build(out, record, device=device, log=log)
        except CheckFailed as exc:
            record["checks"] = {"failures": [str(exc)]}
            failed = exc
        lap("self-check")
    record["seconds"] = timings
    record["files"] = _digests(out)
    (out / RECORD_NAME).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    if failed is not None:
        raise failed
    log(f"[{time.monotonic() - began:7.1f} s] done: {out}")
    return record


def _noisy(
    spec: OracleSpec,
    draw: weights.Draw,
    target: dict[str, Any],
    *,
    batch: Any,
    nxt: Any,
    dtype: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The noisy partner's tensors, calibrated to ``spec.noise_alpha``; and its record."""
    assert spec.noise_alpha is not None
    if spec.target == "mimo":
        return _noisy_mtp(spec, draw, target, nxt=nxt, dtype=dtype)
    shape = spec.dims
    dims = weights.dims(shape, shape.num_hidden_layers, qkv_bias=False)
    live = spec.live_layers
    units = {
        i: (draw.normal(shape.hidden_size, shape.hidden_size),
            draw.normal(shape.hidden_size, shape.intermediate_size))
        for i in range(live, shape.num_hidden_layers)
    }  # fmt: skip
    trial = dict(target)
    # What one unit-noise branch writes at the first inert layer, on the clean residual.
    x = target["model.embed_tokens.weight"].to(dtype)[batch]
    positions = torch.arange(batch.shape[1], device=batch.device)
    for i in range(live):
        attn, mlp = reference.decoder_layer(x, target, f"model.layers.{i}.", dims, dtype=dtype,
                                            positions=positions)  # fmt: skip
        x = x + attn + mlp
    p = f"model.layers.{live}."
    trial[p + "self_attn.o_proj.weight"] = units[live][0].to(weights.STORE_DTYPE)
    trial[p + "mlp.down_proj.weight"] = units[live][1].to(weights.STORE_DTYPE)
    attn, mlp = reference.decoder_layer(x, trial, p, dims, dtype=dtype, positions=positions)
    base = calibrate.rms(target["model.embed_tokens.weight"].to(dtype)[batch])
    per_unit = (base / calibrate.rms(attn), base / calibrate.rms(mlp))

    def writes(rel: float) -> dict[str, Any]:
        out = {}
        for i, (o_unit, d_unit) in units.items():
            p = f"model.layers.{i}."
            out[p + "self_attn.o_proj.weight"] = (o_unit * (rel * per_unit[0])).to(
                weights.STORE_DTYPE
            )
            out[p + "mlp.down_proj.weight"] = (d_unit * (rel * per_unit[1])).to(weights.STORE_DTYPE)
        return out

    def measure(rel: float) -> list[float]:
        trial.update(writes(rel))
        return calibrate.acceptance(trial, dims, batch, steps=48, nxt=nxt, dtype=dtype)

    cal = calibrate.calibrate(
        measure, spec.noise_alpha,
        "each inert layer's o_proj and down_proj write relative_scale x the embedding's"
        " RMS of N(0, 1) noise; acceptance of the clean drafter's chain against the noisy"
        " target's greedy output (16 prompts x 48 tokens)",
    )  # fmt: skip
    return writes(cal.relative_scale), cal.as_dict()


def _noisy_mtp(
    spec: OracleSpec, draw: weights.Draw, target: dict[str, Any], *, nxt: Any, dtype: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The MTP layer with noise in its input_proj's hidden block, calibrated."""
    shape = spec.dims
    dims: Dims = weights.dims(shape, shape.num_hidden_layers, qkv_bias=True)
    unit = draw.normal(shape.hidden_size, shape.hidden_size)
    starts = calibrate.prompts(shape.vocab_size, specials=len(SPECIAL_TOKENS), batch=1,
                               length=2048, device=draw.device, seed=spec.seed + 2)[0]  # fmt: skip
    trial = dict(target)
    name = f"{weights.MTP_PREFIX}input_proj.weight"

    def measure(rel: float) -> list[float]:
        trial[name] = weights.input_proj(unit * (rel / shape.hidden_size**0.5))
        return calibrate.mtp_acceptance(trial, dims, starts, nxt=nxt, dtype=dtype)

    cal = calibrate.calibrate(
        measure, spec.noise_alpha or 0.0,
        "hidden block of the MTP input_proj = relative_scale / sqrt(hidden) * N(0, 1);"
        " acceptance simulated through the MTP layer from 2048 start tokens",
    )  # fmt: skip
    tensors = {k: v for k, v in target.items() if k.startswith(weights.MTP_PREFIX)}
    tensors[name] = weights.input_proj(unit * (cal.relative_scale / shape.hidden_size**0.5))
    return tensors, cal.as_dict()
