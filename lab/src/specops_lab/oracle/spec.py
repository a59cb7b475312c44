"""What an oracle build is made of: families, shapes, the spec, the permutation.

Standard library only (plus the collection's stdlib ``errors``): the controller reads it
without torch, and the builder (:mod:`specops_lab.oracle.builder`, torch) builds from it.

A **family** names a speculative partner and, through it, the target architecture:

- ``draft_model``: a Llama target whose layers from ``live_layers`` on are inert
  (``o_proj`` and ``down_proj`` zero: they read every weight and write KV, so they cost
  what a real layer costs, but add nothing to the residual stream); the drafter is its
  first ``live_layers`` layers with the same embeddings, final norm and lm_head, so it
  computes the target's function: acceptance 1 by construction;
- ``mtp``: a MiMo target (``MiMoForCausalLM``, Qwen2 blocks, ``num_nextn_predict_layers:
  1``) whose decoder layers are all inert, and an MTP layer (``model.mtp_layers.0.*``)
  whose ``input_proj`` passes the next token's embedding through, so it predicts the
  next-next token: acceptance 1 at every depth (vLLM reuses the one layer for k > 1);
- ``dflash``, ``eagle3``: drafters of the engines' real config shapes with random
  weights beside the Llama target (acceptance about 0: they prove the engine loads
  what the drafter preflight passed and that the counters are read).

Every target's lm_head is a scaled permutation of its embeddings: row ``j`` is
``margin / hidden * ê[prev(j)]`` (``ê`` the embedding row scaled to unit RMS), so the
target's greedy (and sampled) next token after ``x`` is ``next(x)`` with a top-1 logit of
``margin`` and a margin to the runner-up of about ``margin * (1 - 4.5 / sqrt(hidden))``.
``next`` is a permutation of the non-special token ids made of cycles of ``cycle`` ids
(:func:`next_map`): the output repeats with that period, which n-gram speculation finds.
Special ids are fixed points no other id reaches, so generation never stops on its own.

The **noise knob** (``noise_alpha``) adds a partner whose first-position acceptance is
about that value: noise in the inert layers of the Llama target (``target-noisy``,
served with the clean ``drafter``) or in the hidden block of the MTP layer's
``input_proj`` (``target-noisy`` of the MiMo family). The builder calibrates the scale
(:mod:`specops_lab.oracle.calibrate`) and records what it measured.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError

__all__ = [
    "DTYPES",
    "FAMILIES",
    "FAMILY_TARGET",
    "NEXT_NAME",
    "RECORD_NAME",
    "SHAPES",
    "SPECIAL_TOKENS",
    "TARGETS",
    "OracleSpec",
    "Shape",
    "chain",
    "folders",
    "next_map",
]

FAMILIES: Final = ("draft_model", "mtp", "dflash", "eagle3")
TARGETS: Final = ("llama", "mimo")
# The target architecture each family's partner serves beside.
FAMILY_TARGET: Final[Mapping[str, str]] = {
    "draft_model": "llama",
    "mtp": "mimo",
    "dflash": "llama",
    "eagle3": "llama",
}
DTYPES: Final = ("bfloat16", "float32")
# Token ids 0..3, in this order (the tokenizer adds them first). ChatML's, as the lab's
# tiny model has them, and DFlash's mask token (SGLang 0.5.11 DEFAULT_DFLASH_MASK_TOKEN).
SPECIAL_TOKENS: Final = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>")
RECORD_NAME: Final = "specops-oracle.json"
# next[x] for every token id, beside the record (what a reader checks output against).
NEXT_NAME: Final = "oracle-next.json"


@dataclass(frozen=True)
class Shape:
    """A target's dimensions (``head_dim`` = hidden / heads)."""

    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int = 4096
    note: str = ""

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def layer_params(self) -> int:
        """Weights of one decoder layer (biases and norms left out)."""
        h, kv = self.hidden_size, self.num_key_value_heads * self.head_dim
        return h * h * 2 + h * kv * 2 + 3 * h * self.intermediate_size

    def params(self) -> int:
        """Weights of the target: layers, embeddings and an untied lm_head."""
        return self.num_hidden_layers * self.layer_params() + 2 * self.vocab_size * self.hidden_size


SHAPES: Final[Mapping[str, Shape]] = {
    s.name: s
    for s in (
        # The CPU shapes take the lab tiny model's context (its servers ask for 8192).
        Shape("tiny", 128, 8, 4, 2, 384, 4096, 32768, "self-checks and unit tests (CPU, seconds)"),
        Shape(
            "cpu", 256, 8, 8, 4, 768, 4096, 32768,
            "the lab's CPU vLLM in CI (scripts/setup.sh vllm builds it; docs/testing.md)",
        ),
        Shape(
            "mistral7b", 4096, 32, 32, 8, 14336, 32000, 4096,
            "Mistral-7B's shape (7.24 B parameters, 14.5 GB bf16): the H100 runs",
        ),
        Shape(
            "mimo7b", 4096, 36, 32, 8, 11008, 32000, 4096,
            "MiMo-7B's shape: the H100 MTP runs (vLLM 0.20.1 mtp, SGLang 0.5.11 NEXTN)",
        ),
        Shape(
            "mimo-h100", 4096, 12, 32, 8, 11008, 32000, 4096,
            "MiMo-7B's layer at a third of its depth (2.4 B parameters, 4.8 GB bf16): seven"
            " servers of it share one H100 in the device campaign (scripts/serve-gpu-device.py"
            " --campaign oracle)",
        ),
        Shape(
            "llama-h100", 2048, 8, 16, 8, 5632, 32000, 4096,
            "a 0.5 B Llama for the DFlash and EAGLE3 drafters' loading and counters on the"
            " card (random drafters: no speed is claimed)",
        ),
    )
}  # fmt: skip


def _positive(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValidationError(f"oracle.{name}", f"must be an integer >= 1 (got {value!r})")
    return value


@dataclass(frozen=True)
class OracleSpec:
    """The builder's inputs; a build's cache key is a digest of these (:meth:`digest`).

    ``families``: one or more of :data:`FAMILIES` sharing one target architecture
    (draft_model, dflash and eagle3 share the Llama target; mtp has the MiMo one).
    """

    families: tuple[str, ...]
    shape: str
    cycle: int = 64
    margin: float = 32.0
    # Llama family: the drafter's layers; they write a little (live_ratio of the
    # embedding's RMS per branch) so the target's output still follows next().
    live_layers: int = 2
    live_ratio: float = 0.05
    # First-position acceptance of the noisy partner; None builds none.
    noise_alpha: float | None = 0.7
    # The dtype the noise is calibrated in: what the engine computes in (the GPU runs
    # bfloat16; the lab's CPU vLLM serves in float32).
    calibration_dtype: str = "bfloat16"
    dflash_block_size: int = 16
    dflash_layers: int = 2
    dflash_window: int = 2048
    eagle3_draft_vocab: int = 0  # 0: a quarter of the vocabulary
    seed: int = 1234
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "families", _families(self.families))
        if self.shape not in SHAPES:
            raise ValidationError(
                "oracle.shape", f"must be one of {', '.join(SHAPES)} (got {self.shape!r})"
            )
        _check_target_fields(self)
        _check_partner_fields(self)

    @property
    def target(self) -> str:
        return FAMILY_TARGET[self.families[0]]

    @property
    def dims(self) -> Shape:
        return SHAPES[self.shape]

    @property
    def draft_vocab(self) -> int:
        return self.eagle3_draft_vocab or self.dims.vocab_size // 4

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["families"] = list(self.families)
        data.pop("extra")
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> OracleSpec:
        """A spec from a mapping (a record's ``spec``, a test's dict); unknown keys refused."""
        valid = [f.name for f in fields(cls) if f.name != "extra"]
        for key in data:
            if key not in valid:
                raise ValidationError(
                    f"oracle.{key}", f"unknown key; valid keys: {', '.join(valid)}"
                )
        values = dict(data)
        fams = values.get("families")
        if isinstance(fams, str):
            values["families"] = tuple(x for x in fams.split(",") if x)
        elif isinstance(fams, list):
            values["families"] = tuple(fams)
        return cls(**values)


def _families(fams: object) -> tuple[str, ...]:
    if isinstance(fams, str) or not isinstance(fams, Sequence) or not fams:
        raise ValidationError(
            "oracle.families", f"must be a non-empty list of {', '.join(FAMILIES)}"
        )
    for fam in fams:
        if fam not in FAMILIES:
            raise ValidationError(
                "oracle.family", f"must be one of {', '.join(FAMILIES)} (got {fam!r})"
            )
    out = tuple(sorted(set(fams), key=FAMILIES.index))
    if len({FAMILY_TARGET[f] for f in out}) != 1:
        by = ", ".join(f"{f} -> {FAMILY_TARGET[f]}" for f in out)
        raise ValidationError(
            "oracle.families",
            f"must share one target architecture ({by}); build mtp apart from"
            " draft_model/dflash/eagle3",
        )
    return out


def _number(name: str, value: object, low: float, high: float, what: str) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise ValidationError(f"oracle.{name}", f"must be {what} (got {value!r})")


def _check_target_fields(spec: OracleSpec) -> None:
    shape = spec.dims
    room = shape.vocab_size - len(SPECIAL_TOKENS)
    _positive("cycle", spec.cycle)
    if not 2 <= spec.cycle <= room:
        raise ValidationError(
            "oracle.cycle", f"must be in [2, {room}], the non-special ids (got {spec.cycle})"
        )
    _number("margin", spec.margin, 4.0, 200.0, "a number in [4, 200] logits")
    _positive("live_layers", spec.live_layers)
    if spec.live_layers >= shape.num_hidden_layers:
        raise ValidationError(
            "oracle.live_layers",
            f"must be < the target's {shape.num_hidden_layers} layers (got {spec.live_layers})",
        )
    _number("live_ratio", spec.live_ratio, 0.0, 0.5, "in [0, 0.5]")
    if spec.noise_alpha is not None:
        _number("noise_alpha", spec.noise_alpha, 0.05, 0.95,
                "in [0.05, 0.95], or null for no noisy partner")  # fmt: skip
    if spec.calibration_dtype not in DTYPES:
        raise ValidationError(
            "oracle.calibration_dtype",
            f"must be one of {', '.join(DTYPES)} (got {spec.calibration_dtype!r})",
        )


def _check_partner_fields(spec: OracleSpec) -> None:
    shape = spec.dims
    _positive("dflash_block_size", spec.dflash_block_size)
    _positive("dflash_layers", spec.dflash_layers)
    _positive("dflash_window", spec.dflash_window)
    if spec.dflash_window < spec.dflash_block_size:
        raise ValidationError(
            "oracle.dflash_window",
            f"must be >= dflash_block_size ({spec.dflash_block_size}) (got {spec.dflash_window})",
        )
    vocab = spec.eagle3_draft_vocab
    if not isinstance(vocab, int) or isinstance(vocab, bool) or not 0 <= vocab <= shape.vocab_size:
        raise ValidationError(
            "oracle.eagle3_draft_vocab",
            f"must be 0 (a quarter) or 1..{shape.vocab_size} (got {vocab!r})",
        )
    if "eagle3" in spec.families and shape.num_hidden_layers < 6:
        raise ValidationError(
            "oracle.shape",
            f"eagle3 reads target layers (2, n/2, n-3): {spec.shape} has"
            f" {shape.num_hidden_layers} layers, at least 6 are needed",
        )


def folders(spec: OracleSpec) -> tuple[str, ...]:
    """The model folders a build writes, in build order (``target`` first)."""
    out = ["target"]
    if spec.noise_alpha is not None and ({"draft_model", "mtp"} & set(spec.families)):
        out.append("target-noisy")
    if "draft_model" in spec.families or "mtp" in spec.families:
        out.append("drafter")
    out += [f for f in ("dflash", "eagle3") if f in spec.families]
    return tuple(out)


def next_map(
    vocab_size: int, cycle: int, seed: int, specials: int = len(SPECIAL_TOKENS)
) -> list[int]:
    """``next[x]``: the token the target emits after ``x`` (a permutation).

    Special ids ``0..specials-1`` are fixed points; the rest are shuffled with
    ``random.Random(seed)`` (stable across Python versions) and cut into cycles of
    ``cycle`` ids (a remainder shorter than 2 joins the last cycle).
    """
    rest = list(range(specials, vocab_size))
    random.Random(seed).shuffle(rest)  # noqa: S311 - a fixed permutation, not a secret
    cycles = [rest[i : i + cycle] for i in range(0, len(rest), cycle)]
    if len(cycles) > 1 and len(cycles[-1]) < 2:
        cycles[-2].extend(cycles.pop())
    nxt = list(range(vocab_size))
    for ring in cycles:
        for i, token in enumerate(ring):
            nxt[token] = ring[(i + 1) % len(ring)]
    return nxt


def chain(nxt: Sequence[int], start: int, length: int) -> list[int]:
    """The ``length`` tokens the target emits after ``start``: next(start), next²(start), ..."""
    out: list[int] = []
    token = start
    for _ in range(length):
        token = nxt[token]
        out.append(token)
    return out


def cycle_of(nxt: Sequence[int], token: int) -> int:
    """The length of the cycle ``token`` is on (1 for a special id)."""
    n, x = 1, nxt[token]
    while x != token:
        x = nxt[x]
        n += 1
        if n > len(nxt):  # pragma: no cover - a permutation always closes
            raise ValueError("next map is not a permutation")
    return n


def expected_margin(spec: OracleSpec) -> float:
    """The runner-up gap the construction gives, roughly: margin * (1 - 4.5 / sqrt(hidden))."""
    return spec.margin * (1.0 - 4.5 / math.sqrt(spec.dims.hidden_size))
