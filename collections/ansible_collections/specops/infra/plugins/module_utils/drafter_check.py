"""The drafter preflight for every drafter method, on the path the weights were fetched to.

``dflash_drafter`` holds the DFlash rules (mask token, target layer ids, layer types,
block). This module runs the check every speculative drafter gets before its unit
changes, on either engine:

- **where**: the profile's ``draft_model`` is a directory, or a hub id that is looked up
  in the hub cache ``inference_engine`` downloaded it into
  (``<cache>/models--ORG--NAME/refs/<revision>`` -> ``snapshots/<commit>``), so a
  drafter named by hub id (the usual case) is checked on the files the engine will load;
- **dflash / ddtree**: every ``dflash_drafter`` rule;
- **eagle / eagle3 / draft_model**: the drafter reads the target's hidden states or
  shares its tokenizer: ``vocab_size`` must equal the target's, and for EAGLE heads
  ``hidden_size`` too; a drafter that has ``layer_types`` gets the sliding-window rules;
- **known drafters** (:data:`KNOWN_DRAFTERS`, extended by the inventory): a drafter
  recognised by its hub id, its hub-cache path, or its target's and its own shape must
  have the expected layer pattern, window, mask token and target layer ids. This is
  what catches a re-saved config whose sliding window was flattened AND switched off
  (``layer_types`` all ``full_attention``, ``use_sliding_window: false``,
  ``sliding_window: null``): nothing inside such a file contradicts itself, and vLLM
  takes no window argument to compare with;
- **a pinned sha256** of the drafter's ``config.json`` (from the inventory, or the
  table) must match the file byte for byte.

An unknown drafter without a pin is not refused: the result carries a warning that
lists what could not be checked. Stdlib only (the ``drafter_preflight`` module runs it
on the serving host; ``specops profile check-drafter`` on the controller).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.dflash_drafter import (
    ABSENT,
    DrafterFinding,
    check_drafter_config,
    check_layer_types,
    load_config_json,
)

__all__ = [
    "DRAFTER_METHODS",
    "HUB_ID",
    "KNOWN_DRAFTERS",
    "DrafterReport",
    "check",
    "default_hub_cache",
    "fetch_hint",
    "hub_id_of",
    "resolve",
]

DRAFTER_METHODS = ("dflash", "ddtree", "eagle", "eagle3", "draft_model")
_PARALLEL = ("dflash", "ddtree")
_SEED_DRAFTER_SOURCE = (
    "the seeds' deployment of Qwen3.6-27B with this DFlash drafter: 5 layers, 4"
    " sliding_attention + 1 full_attention, sliding_window 2048 with use_sliding_window"
    " true (served on SGLang with --speculative-dflash-draft-window-size 2048 and on vLLM"
    " 0.20.1 + PR #40898, which builds drafter layers from layer_types); the re-saved"
    " config (all full_attention) gave acceptance ~1.1"
)
# Facts per drafter checkpoint, each with its source. ``recognise`` finds a copy that is
# not named by its hub id (target and drafter shape); ``expect`` is compared key by key
# with the drafter's config.json (dotted keys reach into dflash_config). Extend it with
# the inventory (inference_service_drafter_known), same shape, keyed by hub id or path.
KNOWN_DRAFTERS: Mapping[str, Mapping[str, Any]] = {
    "z-lab/Qwen3.6-27B-DFlash": {
        "methods": ["dflash", "ddtree"],  # DDTree drafts with a DFlash drafter
        "target": "Qwen/Qwen3.6-27B",
        "recognise": {
            # Qwen3.6-27B: 64 layers (16 full + 48 linear attention), vocabulary 248320
            "target": {"num_hidden_layers": 64, "vocab_size": 248320},
            "drafter": {"num_hidden_layers": 5, "architectures": ["DFlashDraftModel"]},
        },
        "expect": {
            "num_hidden_layers": 5,
            "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
            "use_sliding_window": True,
            "sliding_window": 2048,
            # The published config.json's DFlash keys (block_size at its top level):
            # read from public code that embeds that file (issue 49; docs/speculative.md
            # "Known drafters"). DFlash's default spacing for 64 target and 5 drafter
            # layers is the same [1, 16, 31, 46, 61]; ids shifted by one (the layer_id + 1
            # offset vLLM PR #40727 fixed) or another mask id fail here, not warn.
            "dflash_config.mask_token_id": 248070,
            "dflash_config.target_layer_ids": [1, 16, 31, 46, 61],
            "dflash_config.block_size": 16,
        },
        "source": _SEED_DRAFTER_SOURCE,
    },
}
# What a DFlash drafter's entry must pin (else a warning names what it leaves unchecked).
_CHECKABLE = ("layer_types", "sliding_window", "dflash_config.mask_token_id",
              "dflash_config.target_layer_ids", "dflash_config.block_size")  # fmt: skip
_HUB_PATH = re.compile(r"/models--([^/]+?)--([^/]+)/snapshots/[^/]+/?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass
class DrafterReport:
    """Findings (refuse), warnings (what could not be checked), and what was checked."""

    findings: list[DrafterFinding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    known: str = ""
    drafter_dir: str = ""
    target_dir: str = ""
    config_sha256: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "findings": [f.as_dict() for f in self.findings],
            "warnings": list(self.warnings),
            "known": self.known,
            "drafter_dir": self.drafter_dir,
            "target_dir": self.target_dir,
            "config_sha256": self.config_sha256,
        }


def hub_id_of(path: str) -> str | None:
    """``ORG/NAME`` of a hub-cache snapshot directory, else None."""
    match = _HUB_PATH.search(path.rstrip("/") + "/")
    return f"{match.group(1)}/{match.group(2)}" if match else None


HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def default_hub_cache(environ: Mapping[str, str] | None = None) -> str:
    """Where this machine's Hugging Face hub cache is (as huggingface_hub finds it):
    ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return env["HF_HUB_CACHE"]
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return os.path.join(home, "hub")


def fetch_hint(model: str, revision: str | None, hub_cache: str) -> str:
    """What to run so that ``model``'s config.json is in ``hub_cache`` (nothing else is
    read: the weights are not needed to check a config)."""
    rev = revision or "main"
    return (
        f"fetch its config.json into that cache: huggingface-cli download {model}"
        f" config.json --revision {rev} --cache-dir {hub_cache} (or name the snapshot"
        " directory a node holds: <cache_dir>/hub/models--"
        f"{model.replace('/', '--')}/snapshots/<commit>)"
    )


def resolve(model: str, revision: str | None, hub_cache: str | None) -> tuple[str | None, str]:
    """The directory ``model`` (a path or a hub id) is loaded from, or None and why."""
    if model.startswith("/"):
        return (model, "") if os.path.isdir(model) else (None, f"{model} is not a directory")
    if not hub_cache:
        return None, f"{model} is a hub id and no hub cache was given"
    repo = os.path.join(hub_cache, "models--" + model.replace("/", "--"))
    rev = revision or "main"
    commit = rev if _COMMIT.match(rev) else ""
    if not commit:
        try:
            with open(os.path.join(repo, "refs", rev), encoding="utf-8") as fh:
                commit = fh.read().strip()
        except OSError:
            return None, (
                f"{model}@{rev} is not in the hub cache {hub_cache} (inference_engine"
                " downloads it: set inference_engine_draft_model / inference_engine_model)"
            )
    snapshot = os.path.join(repo, "snapshots", commit)
    if not os.path.isdir(snapshot):
        return None, f"{model}@{rev}: snapshot {commit} is missing from {hub_cache}"
    return snapshot, ""


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            # DFlash keys may also sit at the top level
            return config.get(dotted.rsplit(".", 1)[-1], ABSENT) if "." in dotted else ABSENT
        node = node[part]
    return node


def _matches(config: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(_text(config).get(k, config.get(k)) == v for k, v in wanted.items())


def _find_known(
    table: Mapping[str, Mapping[str, Any]],
    names: list[str],
    method: str,
    target: Mapping[str, Any],
    drafter: Mapping[str, Any],
) -> tuple[str, Mapping[str, Any]] | None:
    for name in names:
        if name in table:
            return name, table[name]
    for name, entry in table.items():
        recognise = entry.get("recognise")
        if not isinstance(recognise, Mapping) or method not in entry.get("methods", [method]):
            continue
        if _matches(target, recognise.get("target") or {}) and _matches(
            drafter, recognise.get("drafter") or {}
        ):
            return f"{name} (recognised by its target's and its own shape)", entry
    return None


def _generic(
    method: str, target: Mapping[str, Any], drafter: Mapping[str, Any]
) -> list[DrafterFinding]:
    """Rules for drafters that are not DFlash blocks (EAGLE heads, draft models)."""
    findings = []
    want_vocab = _text(target).get("vocab_size")
    vocab = _text(drafter).get("vocab_size", ABSENT)
    if want_vocab is not None and vocab is not ABSENT and vocab != want_vocab:
        findings.append(DrafterFinding(
            "drafter.vocab_size", vocab, f"{want_vocab}, the target's vocab_size (the drafter"
            " proposes the target's token ids)",
        ))  # fmt: skip
    if method in ("eagle", "eagle3"):
        want_hidden = _text(target).get("hidden_size")
        hidden = _text(drafter).get("hidden_size", ABSENT)
        if want_hidden is not None and hidden is not ABSENT and hidden != want_hidden:
            findings.append(DrafterFinding(
                "drafter.hidden_size", hidden, f"{want_hidden}, the target's hidden_size (an"
                " EAGLE head reads the target's hidden states)",
            ))  # fmt: skip
    if "layer_types" in drafter:
        findings += check_layer_types(drafter)
    return findings


def _sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def check(
    method: str,
    target_dir: str,
    drafter_dir: str,
    *,
    drafter_id: str = "",
    window: int | None = None,
    num_draft_tokens: int | None = None,
    known: Mapping[str, Mapping[str, Any]] | None = None,
    config_sha256: str = "",
) -> DrafterReport:
    """Every check for a ``method`` drafter at ``drafter_dir`` serving ``target_dir``."""
    report = DrafterReport(drafter_dir=drafter_dir, target_dir=target_dir)
    if method not in DRAFTER_METHODS:
        report.findings.append(
            DrafterFinding("speculative.method", method, f"one of {', '.join(DRAFTER_METHODS)}")
        )
        return report
    target, bad_t = load_config_json(os.path.join(target_dir, "config.json"), "target")
    drafter_path = os.path.join(drafter_dir, "config.json")
    drafter, bad_d = load_config_json(drafter_path, "drafter")
    report.findings += [f for f in (bad_t, bad_d) if f is not None]
    if target is None or drafter is None:
        return report
    report.config_sha256 = _sha256(drafter_path)
    tokenizer_path = os.path.join(target_dir, "tokenizer_config.json")
    tokenizer = (
        load_config_json(tokenizer_path, "tokenizer")[0] if os.path.exists(tokenizer_path) else None
    )
    if method in _PARALLEL:
        report.findings += check_drafter_config(
            target, drafter, window=window, num_draft_tokens=num_draft_tokens,
            target_tokenizer=tokenizer,
        )  # fmt: skip
    else:
        report.findings += _generic(method, target, drafter)
    table = {**KNOWN_DRAFTERS, **(known or {})}
    names = [n for n in (drafter_id, drafter_dir, hub_id_of(drafter_dir) or "") if n]
    found = _find_known(table, names, method, target, drafter)
    pinned = config_sha256
    unchecked: list[str] = []
    if found is not None:
        name, entry = found
        report.known = name
        source = str(entry.get("source", "the inventory"))
        expect = entry.get("expect") or {}
        # A key the consistency checks already named (``drafter.dflash_config.
        # target_layer_ids[4]``, or a top-level DFlash key) is not named twice.
        seen = {
            f.field.split("[")[0].rsplit(".", 1)[-1]
            for f in report.findings
            if f.field.startswith("drafter.")
        }
        for key, want in expect.items():
            have = _get(drafter, key)
            if have != want and key.rsplit(".", 1)[-1] not in seen:
                report.findings.append(DrafterFinding(
                    f"drafter.{key}", have, f"{want!r} (known drafter {name}: {source})"
                ))  # fmt: skip
        unchecked = [k for k in _CHECKABLE if k not in expect] if method in _PARALLEL else []
        pinned = pinned or str(entry.get("config_sha256", ""))
    if pinned and pinned.lower() != report.config_sha256:
        report.findings.append(DrafterFinding(
            "drafter.config.json", f"sha256 {report.config_sha256}", f"sha256 {pinned.lower()}"
            " (the pinned config; a re-saved or edited file differs)",
        ))  # fmt: skip
    if found is None and not pinned:
        what = ["its layer pattern and sliding window against the checkpoint it came from"]
        if method in _PARALLEL:
            what += ["its mask token and target layer ids against the checkpoint"]
        report.warnings.append(
            f"unknown drafter {drafter_id or drafter_dir}: not checked: {'; '.join(what)}"
            " (add it to inference_service_drafter_known or pin"
            f" inference_service_drafter_config_sha256: {report.config_sha256})"
        )
    elif unchecked:
        report.warnings.append(
            f"known drafter {report.known}: the table pins no {', '.join(unchecked)};"
            " those were checked only for consistency with the target"
        )
    if tokenizer is None and method in _PARALLEL:
        report.warnings.append(
            f"{target_dir} has no tokenizer_config.json: the mask token id was checked only"
            " against the vocabulary size"
        )
    return report
