"""DFlash drafter preflight: check a drafter's RAW config.json against its target's.

This is the one home of the check. It is stdlib-only because it also runs on managed
hosts (the ``specops.infra.drafter_preflight`` module); the controller-side package
``specops.speculative.drafter`` imports it from here.

Why raw JSON: transformers' ``Qwen3Config`` sets ``sliding_window`` to None unless
``use_sliding_window`` is true and, when ``layer_types`` is absent, rebuilds it from
``max_window_layers`` (default 28), so a 5-layer drafter silently becomes all
``full_attention``. Loading a drafter config through a library class (and re-saving
it) corrupts it; this module reads the JSON as written and never imports transformers.

Field names in findings are dotted paths: ``drafter.dflash_config.mask_token_id``,
``drafter.layer_types[3]``, ``target.num_hidden_layers``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LAYER_TYPES",
    "DrafterFinding",
    "check_drafter_config",
    "check_drafter_dirs",
    "check_layer_types",
    "default_target_layer_ids",
    "format_findings",
    "load_config_json",
]

LAYER_TYPES = ("sliding_attention", "full_attention")
# SGLang 0.5.11 sglang/srt/speculative/dflash_utils.py DEFAULT_DFLASH_MASK_TOKEN.
DEFAULT_MASK_TOKEN = "<|MASK|>"  # noqa: S105 - a vocabulary token, not a secret


@dataclass(frozen=True)
class DrafterFinding:
    """One thing wrong: the field, what was found, what was expected."""

    field: str
    found: Any
    expected: str

    @property
    def message(self) -> str:
        return f"{self.field}: found {_show(self.found)}, expected {self.expected}"

    def as_dict(self) -> dict[str, Any]:
        found = "absent" if self.found is ABSENT else self.found
        return {"field": self.field, "found": found, "expected": self.expected}


class _Absent:
    """Marker for a key that is not in the JSON at all (distinct from null)."""

    def __repr__(self) -> str:
        return "absent"


ABSENT: Any = _Absent()


def _show(value: Any) -> str:
    if value is ABSENT:
        return "absent"
    return json.dumps(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multimodal targets (Qwen3.5/3.6 ``*ForConditionalGeneration``) nest the LM."""
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config


def _text_prefix(config: Mapping[str, Any], prefix: str) -> str:
    return f"{prefix}.text_config" if isinstance(config.get("text_config"), Mapping) else prefix


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """DFlash's default layer spacing (SGLang 0.5.11 ``build_target_layer_ids``)."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end < start:
        return []
    span = end - start
    return [round(start + (i * span) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def _dflash_value(drafter: Mapping[str, Any], key: str) -> tuple[str, Any]:
    """A DFlash key from ``dflash_config`` or, as current checkpoints allow, top level."""
    section = drafter.get("dflash_config")
    if isinstance(section, Mapping) and key in section:
        return f"drafter.dflash_config.{key}", section[key]
    if key in drafter:
        return f"drafter.{key}", drafter[key]
    return f"drafter.dflash_config.{key}", ABSENT


def _check_target(target: Mapping[str, Any]) -> tuple[list[DrafterFinding], int | None, int | None]:
    findings: list[DrafterFinding] = []
    text = _text_config(target)
    prefix = _text_prefix(target, "target")
    vocab = text.get("vocab_size", ABSENT)
    layers = text.get("num_hidden_layers", ABSENT)
    if not _is_int(vocab) or vocab <= 0:
        findings.append(DrafterFinding(f"{prefix}.vocab_size", vocab, "a positive integer"))
        vocab = None
    if not _is_int(layers) or layers <= 0:
        findings.append(DrafterFinding(f"{prefix}.num_hidden_layers", layers, "a positive integer"))
        layers = None
    return findings, vocab, layers


def _check_mask(
    drafter: Mapping[str, Any], vocab: int | None, tokenizer: Mapping[str, Any] | None
) -> list[DrafterFinding]:
    field, mask_id = _dflash_value(drafter, "mask_token_id")
    if not _is_int(mask_id):
        return [DrafterFinding(field, mask_id, "an integer token id of the target vocabulary")]
    if vocab is not None and not 0 <= mask_id < vocab:
        return [DrafterFinding(field, mask_id, f"0 <= id < target vocab_size ({vocab})")]
    _found, mask_token = _dflash_value(drafter, "mask_token")
    token = mask_token if isinstance(mask_token, str) and mask_token else DEFAULT_MASK_TOKEN
    known = _added_token_id(tokenizer, token) if tokenizer is not None else None
    if known is not None and known != mask_id:
        return [
            DrafterFinding(
                field, mask_id, f"{known}, the id of {token!r} in the target tokenizer_config.json"
            )
        ]
    return []


def _added_token_id(tokenizer: Mapping[str, Any], token: str) -> int | None:
    decoder = tokenizer.get("added_tokens_decoder")
    if not isinstance(decoder, Mapping):
        return None
    for key, entry in decoder.items():
        if isinstance(entry, Mapping) and entry.get("content") == token:
            try:
                return int(key)
            except ValueError:
                return None
    return None


def _check_layer_ids(
    drafter: Mapping[str, Any], target_layers: int | None, draft_layers: int | None
) -> list[DrafterFinding]:
    findings: list[DrafterFinding] = []
    field, ids = _dflash_value(drafter, "target_layer_ids")
    hint = ""
    if target_layers is not None and draft_layers is not None:
        default = default_target_layer_ids(target_layers, draft_layers)
        if default:
            hint = f" (DFlash's default spacing for this pair is {default})"
    if not isinstance(ids, list) or not ids:
        findings.append(
            DrafterFinding(field, ids, f"a non-empty list of target layer indices{hint}")
        )
    else:
        for index, value in enumerate(ids):
            if not _is_int(value):
                findings.append(DrafterFinding(f"{field}[{index}]", value, "an integer"))
            elif target_layers is not None and not 0 <= value < target_layers:
                findings.append(
                    DrafterFinding(
                        f"{field}[{index}]",
                        value,
                        f"0 <= id < target num_hidden_layers ({target_layers}){hint}",
                    )
                )
        if all(_is_int(v) for v in ids) and len(set(ids)) != len(ids):
            findings.append(DrafterFinding(field, ids, "distinct layer indices"))
    num_field, num_target = _dflash_value(drafter, "num_target_layers")
    if num_target is not ABSENT and target_layers is not None and num_target != target_layers:
        findings.append(
            DrafterFinding(
                num_field, num_target, f"{target_layers}, the target's num_hidden_layers"
            )
        )
    return findings


def _check_layers(
    drafter: Mapping[str, Any], draft_layers: int | None, window: int | None
) -> list[DrafterFinding]:
    findings: list[DrafterFinding] = []
    types = drafter.get("layer_types", ABSENT)
    per_layer = f"one entry per drafter layer (num_hidden_layers={draft_layers})"
    if not isinstance(types, list):
        findings.append(
            DrafterFinding(
                "drafter.layer_types",
                types,
                f"a list with {per_layer}, each one of {list(LAYER_TYPES)}"
                " (when it is absent, transformers rebuilds it from max_window_layers"
                " and every layer becomes full_attention)",
            )
        )
        types_ok: list[str] | None = None
    else:
        types_ok = []
        if draft_layers is not None and len(types) != draft_layers:
            findings.append(
                DrafterFinding("drafter.layer_types", types, f"{per_layer}, got {len(types)}")
            )
        for index, value in enumerate(types):
            if value not in LAYER_TYPES:
                findings.append(
                    DrafterFinding(
                        f"drafter.layer_types[{index}]", value, f"one of {list(LAYER_TYPES)}"
                    )
                )
            else:
                types_ok.append(value)

    use_sw = drafter.get("use_sliding_window", ABSENT)
    sw = drafter.get("sliding_window", ABSENT)
    sliding = types_ok is not None and "sliding_attention" in types_ok
    declares_window = use_sw is True and _is_int(sw) and sw > 0

    if sliding or window is not None:
        if use_sw is not True:
            why = "it has sliding_attention layers" if sliding else f"a {window}-token window"
            findings.append(
                DrafterFinding(
                    "drafter.use_sliding_window",
                    use_sw,
                    f"true ({why}; with false, transformers and engines drop sliding_window)",
                )
            )
        want = (
            f"{window}, the profile's draft_window" if window is not None else "a positive integer"
        )
        if not _is_int(sw) or sw <= 0 or (window is not None and sw != window):
            findings.append(DrafterFinding("drafter.sliding_window", sw, want))
    if types_ok is not None and not sliding and (declares_window or window is not None):
        reason = (
            f"the profile expects a {window}-token draft window"
            if window is not None
            else f"use_sliding_window is true and sliding_window is {sw}"
        )
        findings.append(
            DrafterFinding(
                "drafter.layer_types",
                types,
                f"sliding_attention layers ({reason}); every layer is full_attention,"
                " the mark of a config re-saved through transformers",
            )
        )
    return findings


def check_layer_types(
    drafter: Mapping[str, Any], window: int | None = None
) -> list[DrafterFinding]:
    """The layer_types / sliding window rules alone (any drafter that has layer_types)."""
    layers = _text_config(drafter).get("num_hidden_layers")
    return _check_layers(drafter, layers if _is_int(layers) else None, window)


def _check_block(
    drafter: Mapping[str, Any], num_draft_tokens: int | None, window: int | None
) -> list[DrafterFinding]:
    findings: list[DrafterFinding] = []
    field, block = _dflash_value(drafter, "block_size")
    if block is ABSENT:
        return findings
    if not _is_int(block) or block <= 0:
        return [DrafterFinding(field, block, "a positive integer")]
    if num_draft_tokens is not None and num_draft_tokens > block:
        findings.append(
            DrafterFinding(
                "speculative.num_draft_tokens",
                num_draft_tokens,
                f"<= the drafter's {field.removeprefix('drafter.')} ({block}); it was trained"
                f" on blocks of {block}",
            )
        )
    if window is not None and window < block:
        findings.append(
            DrafterFinding(
                "speculative.draft_window", window, f">= the drafter's block_size ({block})"
            )
        )
    return findings


def check_drafter_config(
    target: Mapping[str, Any],
    drafter: Mapping[str, Any],
    *,
    window: int | None = None,
    num_draft_tokens: int | None = None,
    target_tokenizer: Mapping[str, Any] | None = None,
) -> list[DrafterFinding]:
    """Every problem of a DFlash drafter config against its target, in field order.

    ``target`` and ``drafter`` are the parsed config.json files as written (plain
    dicts). ``window`` is the expected draft window (the profile's ``draft_window``,
    2048 for the seeds' drafter); ``num_draft_tokens`` the profile's block. When the
    target's tokenizer_config.json is given and lists the mask token, its id must be
    the drafter's ``mask_token_id``. An empty list means the drafter is fit to serve.
    """
    findings, vocab, target_layers = _check_target(target)
    section = drafter.get("dflash_config", ABSENT)
    if not isinstance(section, Mapping):
        findings.append(
            DrafterFinding(
                "drafter.dflash_config",
                section,
                "an object with mask_token_id and target_layer_ids (is this a DFlash drafter?)",
            )
        )
    draft_layers_raw = _text_config(drafter).get("num_hidden_layers", ABSENT)
    draft_layers: int | None = draft_layers_raw
    if not _is_int(draft_layers_raw) or draft_layers_raw <= 0:
        findings.append(
            DrafterFinding("drafter.num_hidden_layers", draft_layers_raw, "a positive integer")
        )
        draft_layers = None
    findings += _check_mask(drafter, vocab, target_tokenizer)
    findings += _check_layer_ids(drafter, target_layers, draft_layers)
    findings += _check_layers(drafter, draft_layers, window)
    findings += _check_block(drafter, num_draft_tokens, window)
    return findings


def load_config_json(path: str, what: str) -> tuple[dict[str, Any] | None, DrafterFinding | None]:
    """Read a config.json as raw JSON; a missing or broken file is a finding, not a crash."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None, DrafterFinding(what, path, "an existing config.json")
    except (OSError, ValueError) as exc:
        return None, DrafterFinding(what, path, f"a readable JSON file ({exc})")
    if not isinstance(data, dict):
        return None, DrafterFinding(what, type(data).__name__, "a JSON object")
    return data, None


def check_drafter_dirs(
    target_dir: str,
    drafter_dir: str,
    *,
    window: int | None = None,
    num_draft_tokens: int | None = None,
) -> list[DrafterFinding]:
    """Check ``drafter_dir/config.json`` against ``target_dir/config.json``.

    Uses ``target_dir/tokenizer_config.json`` for the mask-token id when it exists.
    """
    target, bad_target = load_config_json(os.path.join(target_dir, "config.json"), "target")
    drafter, bad_drafter = load_config_json(os.path.join(drafter_dir, "config.json"), "drafter")
    problems = [f for f in (bad_target, bad_drafter) if f is not None]
    if target is None or drafter is None:
        return problems
    tokenizer_path = os.path.join(target_dir, "tokenizer_config.json")
    tokenizer: dict[str, Any] | None = None
    if os.path.exists(tokenizer_path):
        tokenizer, bad_tokenizer = load_config_json(tokenizer_path, "target.tokenizer_config")
        if bad_tokenizer is not None:
            return [bad_tokenizer]
    return check_drafter_config(
        target,
        drafter,
        window=window,
        num_draft_tokens=num_draft_tokens,
        target_tokenizer=tokenizer,
    )


def format_findings(findings: Sequence[DrafterFinding]) -> str:
    """One line per finding, for a failure message."""
    return "; ".join(f.message for f in findings)
