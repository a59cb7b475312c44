"""The speculative profile: one engine-neutral description of speculative decoding.

An inventory carries it as a mapping (``speculative:`` in host or group vars);
:meth:`SpeculativeProfile.from_mapping` validates it, and
:func:`speculative.translate.to_argv` turns it into one engine's flags.

Counting convention (the same for every method and engine):

- ``num_steps``: draft forward passes per verify step, i.e. the depth of an
  autoregressive draft chain (mtp, eagle, eagle3, draft_model).
- ``num_draft_tokens``: tokens the target verifies per step, *including* the bonus
  token: SGLang's ``--speculative-num-draft-tokens``. For a chain with ``topk`` 1 it
  is ``num_steps + 1``; for dflash's parallel drafter it is the block size; vLLM's
  ``num_speculative_tokens`` is ``num_draft_tokens - 1``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, get_type_hints

from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError

__all__ = [
    "CHAIN_METHODS",
    "FIELD_DOCS",
    "INT_FIELDS",
    "METHODS",
    "PARALLEL_METHODS",
    "SpeculativeProfile",
]

METHODS: Final = ("none", "mtp", "eagle", "eagle3", "dflash", "ddtree", "ngram", "draft_model")
# Autoregressive draft chains: num_steps is their depth.
CHAIN_METHODS: Final = frozenset({"mtp", "eagle", "eagle3", "draft_model"})
# One parallel drafter pass over a block (DFlash family): num_steps and topk are 1.
PARALLEL_METHODS: Final = frozenset({"dflash", "ddtree"})
# Methods that load a separate drafter checkpoint.
NEEDS_DRAFT_MODEL: Final = frozenset({"eagle", "eagle3", "dflash", "ddtree", "draft_model"})

FIELD_DOCS: Final[Mapping[str, str]] = {
    "method": f"one of {', '.join(METHODS)}",
    "num_steps": "draft depth (chain methods); 1 for dflash/ddtree",
    "topk": "branching per draft step (SGLang EAGLE trees; ddtree: max top-k); 1: a chain",
    "num_draft_tokens": "tokens verified per step incl. the bonus token (dflash: block size)",
    "draft_model": "drafter checkpoint: local path or hub id",
    "draft_model_revision": "drafter revision (branch, tag or commit)",
    "draft_window": "dflash/ddtree draft KV window in tokens, SGLang (the seeds' drafter: 2048)",
    "tree_budget": "ddtree node budget (the target verifies tree_budget + 1 tokens)",
    "prompt_lookup_min": "ngram: shortest prompt n-gram to match (vLLM)",
    "prompt_lookup_max": "ngram: longest prompt n-gram to match (vLLM)",
    "model_mtp_method": "vLLM only: a model-specific *_mtp method name instead of 'mtp'",
    "extra_args": "more engine flags, checked against the engine's flag list",
}

_CHAIN_FIELDS: Final = frozenset(
    {"num_steps", "topk", "num_draft_tokens", "draft_model", "draft_model_revision"}
)

# Which optional fields each method accepts (method and extra_args always allowed).
_ALLOWED: Final[Mapping[str, frozenset[str]]] = {
    "none": frozenset(),
    "mtp": frozenset({"num_steps", "topk", "num_draft_tokens", "model_mtp_method"}),
    "eagle": _CHAIN_FIELDS,
    "eagle3": _CHAIN_FIELDS,
    "draft_model": _CHAIN_FIELDS,
    "dflash": _CHAIN_FIELDS | {"draft_window"},
    # DDTree (SGLang PR #29907) verifies tree_budget + 1 tokens and takes its block
    # from the drafter config; its worker sets the draft model up through DFlash's
    # (DFlashWorkerV2), whose compact draft KV window the window flag turns on: the
    # seeds ran DDTree with --speculative-dflash-draft-window-size 2048.
    "ddtree": frozenset(
        {"num_steps", "topk", "draft_model", "draft_model_revision", "tree_budget", "draft_window"}
    ),
    "ngram": frozenset({"num_draft_tokens", "prompt_lookup_min", "prompt_lookup_max"}),
}


@dataclass(frozen=True)
class SpeculativeProfile:
    """Validated, engine-neutral speculative settings. Unset fields are ``None``.

    Build it with :meth:`from_mapping` (inventory data) or the constructor (Python
    callers such as the sweep); both run the same checks.
    """

    method: str = "none"
    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    draft_model: str | None = None
    draft_model_revision: str | None = None
    draft_window: int | None = None
    tree_budget: int | None = None
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    model_mtp_method: str | None = None
    extra_args: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        _check_types(self)
        _check_method_fields(self)
        if self.method in PARALLEL_METHODS:
            _check_parallel(self)
        if self.method in CHAIN_METHODS:
            _check_chain(self)
        _check_bounds(self)

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any] | None, *, prefix: str = "speculative"
    ) -> SpeculativeProfile:
        """Validate an inventory mapping. ``None`` or ``{}`` means ``method: none``.

        Unknown keys are rejected, naming the key and the valid ones. ``prefix`` is
        the dotted path the mapping lives at, used in every message.
        """
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValidationError(
                prefix, f"must be a mapping of {', '.join(FIELD_DOCS)} (got {_kind(data)})"
            )
        valid = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if not isinstance(key, str) or key not in valid:
                raise ValidationError(
                    f"{prefix}.{key}", f"unknown key; valid keys: {', '.join(valid)}"
                )
        values = dict(data)
        extra = values.get("extra_args", ())
        if extra is None:
            extra = ()
        if isinstance(extra, str) or not isinstance(extra, Sequence):
            raise ValidationError(
                f"{prefix}.extra_args",
                "must be a list of strings, e.g. ['--speculative-attention-mode', 'decode']"
                f" (got {_kind(extra)})",
            )
        values["extra_args"] = tuple(extra)
        if values.get("method") is None:
            values["method"] = "none"
        try:
            return cls(**values)
        except ValidationError as exc:
            if prefix == "speculative":
                raise
            raise ValidationError(
                prefix + exc.field.removeprefix("speculative"), exc.problem
            ) from None

    def to_mapping(self) -> dict[str, Any]:
        """The set fields as an inventory mapping (``from_mapping`` round-trips it)."""
        out: dict[str, Any] = {"method": self.method}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "method" or value is None or value == ():
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @property
    def effective_num_draft_tokens(self) -> int | None:
        """``num_draft_tokens``, or ``num_steps + 1`` for a chain with ``topk`` 1."""
        if self.num_draft_tokens is not None:
            return self.num_draft_tokens
        if self.method in CHAIN_METHODS and self.num_steps is not None and (self.topk or 1) == 1:
            return self.num_steps + 1
        return None


def _fields_typed(kind: type) -> tuple[str, ...]:
    """The profile's optional fields of type ``kind`` (``int | None``), in field order."""
    hints = get_type_hints(SpeculativeProfile)
    return tuple(
        f.name for f in dataclasses.fields(SpeculativeProfile) if hints[f.name] == kind | None
    )


# The integer fields (each >= 1), read from the dataclass; also what a sweep may vary
# (specops.tune.space). The string fields likewise.
INT_FIELDS: Final = _fields_typed(int)
_STR_FIELDS: Final = _fields_typed(str)


def _kind(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def _check_types(p: SpeculativeProfile) -> None:
    if not isinstance(p.method, str) or p.method not in METHODS:
        raise ValidationError(
            "speculative.method", f"must be one of {', '.join(METHODS)} (got {p.method!r})"
        )
    for name in INT_FIELDS:
        value = getattr(p, name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValidationError(f"speculative.{name}", f"must be an integer (got {_kind(value)})")
        if value < 1:
            raise ValidationError(f"speculative.{name}", f"must be >= 1 (got {value})")
    for name in _STR_FIELDS:
        value = getattr(p, name)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise ValidationError(
                f"speculative.{name}", f"must be a non-empty string (got {_kind(value)})"
            )
    if not isinstance(p.extra_args, tuple):
        raise ValidationError(
            "speculative.extra_args", f"must be a list of strings (got {_kind(p.extra_args)})"
        )
    for index, arg in enumerate(p.extra_args):
        if not isinstance(arg, str) or not arg:
            raise ValidationError(
                f"speculative.extra_args[{index}]",
                f"must be a non-empty string (got {_kind(arg)})",
            )
    if p.extra_args and not p.extra_args[0].startswith("--"):
        raise ValidationError(
            "speculative.extra_args[0]",
            f"must be a flag starting with '--' (got {p.extra_args[0]!r})",
        )


def _check_method_fields(p: SpeculativeProfile) -> None:
    allowed = _ALLOWED[p.method]
    for name in (f.name for f in dataclasses.fields(p)):
        if name in ("method", "extra_args") or getattr(p, name) is None or name in allowed:
            continue
        users = sorted(m for m, fields in _ALLOWED.items() if name in fields)
        raise ValidationError(
            f"speculative.{name}",
            f"does not apply to method {p.method!r}; it is used by: {', '.join(users)}",
        )
    if p.method in NEEDS_DRAFT_MODEL and p.draft_model is None:
        raise ValidationError(
            "speculative.draft_model",
            f"is required for method {p.method!r} (a drafter checkpoint path or hub id)",
        )
    if p.method == "ddtree" and p.tree_budget is None:
        raise ValidationError(
            "speculative.tree_budget", "is required for method 'ddtree' (tree node budget, >= 1)"
        )
    if p.method in CHAIN_METHODS and p.num_steps is None:
        raise ValidationError(
            "speculative.num_steps", f"is required for method {p.method!r} (draft depth, >= 1)"
        )


def _check_parallel(p: SpeculativeProfile) -> None:
    # SGLang forces num_steps and topk to 1 for DFLASH (server_args.py
    # _handle_speculative_decoding) and only logs a warning; a profile that says
    # otherwise is rejected here instead. DDTree's topk is its tree's top-k.
    names = ("num_steps",) if p.method == "ddtree" else ("num_steps", "topk")
    for name in names:
        value = getattr(p, name)
        if value is not None and value != 1:
            raise ValidationError(
                f"speculative.{name}",
                f"must be 1 or unset for method {p.method!r}: its drafter fills a whole"
                f" block in one pass (got {value})",
            )


def _check_chain(p: SpeculativeProfile) -> None:
    steps = p.num_steps or 0
    topk = p.topk or 1
    if topk == 1:
        if p.num_draft_tokens is not None and p.num_draft_tokens != steps + 1:
            raise ValidationError(
                "speculative.num_draft_tokens",
                f"must be num_steps + 1 = {steps + 1} when topk is 1 (got"
                f" {p.num_draft_tokens}); SGLang would silently override it",
            )
        return
    if p.num_draft_tokens is None:
        raise ValidationError(
            "speculative.num_draft_tokens",
            "is required when topk > 1 (the tree size; at most"
            f" num_steps * topk + 1 = {steps * topk + 1})",
        )
    if not 2 <= p.num_draft_tokens <= steps * topk + 1:
        raise ValidationError(
            "speculative.num_draft_tokens",
            f"must be between 2 and num_steps * topk + 1 = {steps * topk + 1}"
            f" (got {p.num_draft_tokens})",
        )


def _check_bounds(p: SpeculativeProfile) -> None:
    if (
        p.num_draft_tokens is not None
        and p.method in ("dflash", "ngram")
        and p.num_draft_tokens < 2
    ):
        raise ValidationError(
            "speculative.num_draft_tokens",
            "must be >= 2: it counts the bonus token plus at least one draft"
            f" (got {p.num_draft_tokens})",
        )
    if (
        p.draft_window is not None
        and p.num_draft_tokens is not None
        and p.draft_window < p.num_draft_tokens
    ):
        raise ValidationError(
            "speculative.draft_window",
            f"must be >= num_draft_tokens ({p.num_draft_tokens}), the block the drafter"
            f" writes (got {p.draft_window})",
        )
    if (
        p.prompt_lookup_min is not None
        and p.prompt_lookup_max is not None
        and p.prompt_lookup_min > p.prompt_lookup_max
    ):
        raise ValidationError(
            "speculative.prompt_lookup_min",
            f"must be <= prompt_lookup_max ({p.prompt_lookup_max}) (got {p.prompt_lookup_min})",
        )
    if p.model_mtp_method is not None and not (
        p.model_mtp_method == "mtp" or p.model_mtp_method.endswith("_mtp")
    ):
        raise ValidationError(
            "speculative.model_mtp_method",
            f"must be 'mtp' or a model-specific '*_mtp' method (got {p.model_mtp_method!r})",
        )
