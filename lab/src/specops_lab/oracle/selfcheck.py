"""Check a built oracle folder against its construction (torch, reference forward).

From the files as written (what an engine loads), on prompts the calibration never saw:

- ``target``: greedy output is the permutation chain, token for token; the smallest
  top-1 margin met on the way is recorded (and must be at least a quarter of the
  spec's ``margin``: far from any tie, so batching cannot flip it);
- MiMo ``target``: its MTP layer predicts the token after next at every position of a
  full forward pass (position 0 aside: the engines zero its embedding), and drafting
  ``k`` = 1..5 deep from its own outputs it stays on the chain (acceptance 1.0 each);
- ``drafter``: greedy output is the chain (the target's, so acceptance 1.0);
- ``target-noisy``: per-position acceptance of the chain drafter, first position within
  0.15 of ``noise_alpha``;
- ``dflash`` / ``eagle3``: the project's drafter preflight
  (``ansible_collections.specops.infra.plugins.module_utils.drafter_check``) finds
  nothing wrong against the target, and the weight shapes agree with the config;
- the tokenizer has exactly ``vocab_size`` ids and decodes each of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from specops_lab.oracle import calibrate, reference, weights
from specops_lab.oracle.spec import SPECIAL_TOKENS, OracleSpec

__all__ = ["CheckFailed", "check_build", "load_folder"]

Log = Callable[[str], None]


class CheckFailed(AssertionError):
    """The built models do not do what their construction says."""


def load_folder(path: Path, device: str) -> dict[str, Any]:
    """Every tensor of a model folder, by checkpoint name (as its index lists them)."""
    index = json.loads((path / "model.safetensors.index.json").read_text())
    tensors: dict[str, Any] = {}
    for fname in sorted(set(index["weight_map"].values())):
        tensors.update(load_file(str(path / fname), device=device))
    missing = set(index["weight_map"]) - set(tensors)
    if missing:
        raise CheckFailed(
            f"{path}: tensors in the index but not in the files: {sorted(missing)[:5]}"
        )
    return tensors


def _margins(logits: Any) -> float:
    top = logits.float().topk(2, dim=-1).values
    return float((top[..., 0] - top[..., 1]).min())


@dataclass(frozen=True)
class _Ctx:
    """What every check of one build needs."""

    out: Path
    spec: OracleSpec
    device: str
    dtype: Any
    nxt: Any
    prompts: Any
    steps: int

    @property
    def mimo(self) -> bool:
        return self.spec.target == "mimo"

    def dims(self, layers: int | None = None) -> Any:
        shape = self.spec.dims
        return weights.dims(shape, layers or shape.num_hidden_layers, qkv_bias=self.mimo)

    def starts(self, count: int, seed_offset: int) -> Any:
        shape = self.spec.dims
        return calibrate.prompts(shape.vocab_size, specials=len(SPECIAL_TOKENS), batch=1,
                                 length=count, device=self.device,
                                 seed=self.spec.seed + seed_offset)[0]  # fmt: skip


def _chain_check(ctx: _Ctx, w: dict[str, Any], layers: int | None = None) -> dict[str, Any]:
    dims = ctx.dims(layers)
    tokens = reference.greedy(w, dims, ctx.prompts, steps=ctx.steps, dtype=ctx.dtype, layers=layers)
    want = []
    last = ctx.prompts[:, -1]
    for _ in range(ctx.steps):
        last = ctx.nxt[last]
        want.append(last)
    expected = torch.stack(want, dim=1)
    seq = torch.cat([ctx.prompts, tokens], 1)
    _hidden, logits = reference.forward(w, dims, seq, ctx.dtype, layers=layers)
    return {
        "chain_match": round(float((tokens == expected).float().mean()), 4),
        "min_margin": round(_margins(logits[:, ctx.prompts.shape[1] - 1 : -1]), 3),
        "tokens": int(tokens.numel()),
    }


def _mtp_positions(ctx: _Ctx, w: dict[str, Any]) -> float:
    """Share of positions t >= 1 where MTP(hidden_t, token_t+1) is token_t+2 (full pass)."""
    dims = ctx.dims()
    more = reference.greedy(w, dims, ctx.prompts, steps=16, dtype=ctx.dtype)
    seq = torch.cat([ctx.prompts, more], dim=1)
    hidden, _logits = reference.forward(w, dims, seq, ctx.dtype)
    positions = torch.arange(seq.shape[1] - 1, device=seq.device)
    out = reference.mtp_hidden(w, dims, hidden[:, :-1], seq[:, 1:], dtype=ctx.dtype,
                               positions=positions)  # fmt: skip
    pred = (out @ w["lm_head.weight"].to(ctx.dtype).T).float().argmax(-1)
    want = ctx.nxt[seq[:, 1:]]
    return round(float((pred[:, 1:] == want[:, 1:]).float().mean()), 4)


def _check_target(ctx: _Ctx, failures: list[str]) -> dict[str, Any]:
    target = load_folder(ctx.out / "target", ctx.device)
    results: dict[str, Any] = {"target": _chain_check(ctx, target)}
    t = results["target"]
    if t["chain_match"] != 1.0:
        failures.append(f"target: greedy output follows the chain at {t['chain_match']}, not 1.0")
    if t["min_margin"] < ctx.spec.margin / 4:
        failures.append(
            f"target: top-1 margin {t['min_margin']} < margin/4 ({ctx.spec.margin / 4})"
        )
    if ctx.mimo:
        per = calibrate.mtp_acceptance(target, ctx.dims(), ctx.starts(1024, 8), nxt=ctx.nxt,
                                       dtype=ctx.dtype)  # fmt: skip
        full = _mtp_positions(ctx, target)
        results["mtp"] = {"per_position": per, "next_next_in_forward": full}
        if per != [1.0] * len(per) or full != 1.0:
            failures.append(f"mtp: per-position acceptance {per}, next-next in a forward {full}")
    return results


def _check_drafter(ctx: _Ctx, failures: list[str]) -> dict[str, Any]:
    drafter = load_folder(ctx.out / "drafter", ctx.device)
    layers = json.loads((ctx.out / "drafter" / "config.json").read_text())["num_hidden_layers"]
    result = _chain_check(ctx, drafter, layers)
    if result["chain_match"] != 1.0:
        failures.append(f"drafter: greedy output follows the chain at {result['chain_match']}")
    return result


def _check_noisy(ctx: _Ctx, failures: list[str]) -> dict[str, Any]:
    noisy = load_folder(ctx.out / "target-noisy", ctx.device)
    alpha = ctx.spec.noise_alpha
    if ctx.mimo:
        per = calibrate.mtp_acceptance(noisy, ctx.dims(), ctx.starts(2048, 9), nxt=ctx.nxt,
                                       dtype=ctx.dtype)  # fmt: skip
    else:
        shape = ctx.spec.dims
        fresh = calibrate.prompts(shape.vocab_size, specials=len(SPECIAL_TOKENS), batch=16,
                                  length=32, device=ctx.device, seed=ctx.spec.seed + 9)  # fmt: skip
        per = calibrate.acceptance(noisy, ctx.dims(), fresh, steps=48, nxt=ctx.nxt, dtype=ctx.dtype)
    if alpha is not None and abs(per[0] - alpha) > 0.15:
        failures.append(
            f"target-noisy: first-position acceptance {per[0]} is not within 0.15 of"
            f" noise_alpha {alpha}"
        )
    return {"per_position": per}


def check_build(
    out: Path, record: dict[str, Any], *, device: str = "cpu", log: Log = print
) -> dict[str, Any]:
    """Run every check on the folder ``out`` (written by the builder); raise on failure."""
    spec = OracleSpec.from_mapping(record["spec"])
    shape = spec.dims
    ctx = _Ctx(
        out=out, spec=spec, device=device, dtype=getattr(torch, spec.calibration_dtype),
        nxt=torch.tensor(json.loads((out / "oracle-next.json").read_text()), device=device),
        prompts=calibrate.prompts(shape.vocab_size, specials=len(SPECIAL_TOKENS), batch=4,
                                  length=16, device=device, seed=spec.seed + 7),
        steps=max(32, min(2 * spec.cycle, 96)),
    )  # fmt: skip
    failures: list[str] = []
    results = _check_target(ctx, failures)
    log(f"check target: {json.dumps(results)}")
    if (out / "drafter").is_dir():
        results["drafter"] = _check_drafter(ctx, failures)
        log(f"check drafter: {json.dumps(results['drafter'])}")
    if (out / "target-noisy").is_dir():
        results["target-noisy"] = _check_noisy(ctx, failures)
        log(f"check target-noisy: {json.dumps(results['target-noisy'])}")
    for method in ("dflash", "eagle3"):
        if (out / method).is_dir():
            results[method] = _drafter_preflight(out, method, spec, failures)
            log(f"check {method}: {json.dumps(results[method])}")
    results["tokenizer"] = _tokenizer(out / "target", shape.vocab_size, failures)
    results["failures"] = failures
    if failures:
        raise CheckFailed("; ".join(failures))
    return results


def _drafter_preflight(
    out: Path, method: str, spec: OracleSpec, failures: list[str]
) -> dict[str, Any]:
    from ansible_collections.specops.infra.plugins.module_utils import (  # noqa: PLC0415
        drafter_check,
    )

    report = drafter_check.check(
        method, str(out / "target"), str(out / method),
        num_draft_tokens=spec.dflash_block_size if method == "dflash" else None,
    )  # fmt: skip
    found = [f.message for f in report.findings]
    if found:
        failures.append(f"{method}: the drafter preflight refuses it: {'; '.join(found)}")
    config = json.loads((out / method / "config.json").read_text())
    tensors = load_folder(out / method, "cpu")
    h = config["hidden_size"]
    if method == "dflash":
        want = len(config["dflash_config"]["target_layer_ids"]) * h
    else:
        want = 3 * config["target_hidden_size"]
        if tensors["lm_head.weight"].shape[0] != config["draft_vocab_size"]:
            failures.append("eagle3: lm_head rows != draft_vocab_size")
    if tuple(tensors["fc.weight"].shape) != (h, want):
        failures.append(f"{method}: fc.weight {tuple(tensors['fc.weight'].shape)} != {(h, want)}")
    return {"findings": found, "warnings": report.warnings, "config_sha256": report.config_sha256}


def _tokenizer(folder: Path, vocab: int, failures: list[str]) -> dict[str, Any]:
    from tokenizers import Tokenizer  # noqa: PLC0415

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    size = tok.get_vocab_size()
    bad = [i for i in range(size) if tok.id_to_token(i) is None]
    if size != vocab or bad:
        failures.append(f"tokenizer: {size} ids (want {vocab}), {len(bad)} without a token")
    return {"ids": size}
