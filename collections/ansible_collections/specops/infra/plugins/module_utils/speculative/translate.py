"""The one translator: a :class:`SpeculativeProfile` to one engine's command-line flags.

``launch(profile, engine)`` returns both at once (argv and environment, one pass);
``to_argv(profile, engine)`` returns the speculative part of the engine's argv (the
unit template appends it after the model arguments); ``to_env`` returns environment
variables a method needs (only DDTree's top-k today). Everything the engine version
cannot do is rejected with a :class:`~errors.ValidationError` naming the
profile field and the valid values, before anything is deployed.

``from_argv`` reads such an argv back (the property tests render, re-read and
re-render).

What an engine needs can depend on the target model's architecture: ``target``
(:class:`TargetModel`: the model argument the unit passes and its config.json's
``architectures``) lets the translator render it. SGLang's NEXTN serves a model's own MTP
head; for most architectures it needs ``--speculative-draft-model-path`` set to the
model itself. SGLang 0.5.11 defaults the draft path to the model only for the
architectures in ``ServerArgs._handle_speculative_decoding``'s list (DeepSeek V3/V3.2,
GLM-4 MoE, Bailing MoE, Mistral Large 3, Pixtral, HY-V3), read from its
``server_args.py`` into the flag list (``nextn_self_draft_architectures``; an installed
build's own file is read after every build); a MiMo target (``MiMoForCausalLM``, served
by SGLang's ``MiMoMTP``) without it does not start. So method ``mtp`` on SGLang renders
the model's own path unless the target's architecture is on that list, or the list is
unknown and the architecture too (then the path is rendered: it is valid for every MTP
architecture). vLLM's ``mtp`` takes the target as its own draft for every MTP model
(``SpeculativeConfig.__post_init__``: ``self.model = self.target_model_config.model``)
and needs nothing more. Without ``target`` the line is rendered as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ansible_collections.specops.infra.plugins.module_utils.engine.flags import SELF_DRAFT_KEY
from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import Engine
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    CHAIN_METHODS,
    SpeculativeProfile,
)

__all__ = [
    "SGLANG_ALGORITHM",
    "TargetModel",
    "from_argv",
    "launch",
    "sglang_mtp_draft_path",
    "to_argv",
    "to_env",
    "vllm_speculative_config",
]

# profile method -> SGLang --speculative-algorithm (server_args.py, 0.5.11).
# mtp is NEXTN: SGLang rewrites NEXTN to EAGLE and serves the model's own MTP head (with
# the model's own folder as draft path where the architecture needs it: TargetModel).
SGLANG_ALGORITHM: Final[Mapping[str, str]] = {
    "mtp": "NEXTN",
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "dflash": "DFLASH",
    "ddtree": "DDTREE",
    "ngram": "NGRAM",
    "draft_model": "STANDALONE",
}
_SGLANG_METHOD: Final = {v: k for k, v in SGLANG_ALGORITHM.items()}

# Flags the profile owns; extra_args may not set them behind its back.
_SGLANG_OWNED: Final = {
    "--speculative-algorithm": "method",
    "--speculative-draft-model-path": "draft_model",
    "--speculative-draft-model": "draft_model",
    "--speculative-draft-model-revision": "draft_model_revision",
    "--speculative-num-steps": "num_steps",
    "--speculative-eagle-topk": "topk",
    "--speculative-num-draft-tokens": "num_draft_tokens",
    "--speculative-dflash-block-size": "num_draft_tokens",
    "--speculative-dflash-draft-window-size": "draft_window",
    "--speculative-draft-window-size": "draft_window",
    "--speculative-ddtree-budget": "tree_budget",
}
_VLLM_OWNED: Final = {
    "--speculative-config": "method",
    "--spec-method": "method",
    "--spec-model": "draft_model",
    "--spec-tokens": "num_steps",
}
DDTREE_TOPK_ENV: Final = "SGLANG_DDTREE_MAX_TOPK"


@dataclass(frozen=True)
class TargetModel:
    """The model a profile serves: ``path`` as the unit passes it (a directory or hub id)
    and ``architectures`` from its config.json (empty: not known)."""

    path: str
    architectures: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip():
            raise ValidationError("target.path", f"must be a non-empty string (got {self.path!r})")
        archs = self.architectures
        if isinstance(archs, str) or not all(isinstance(a, str) and a for a in archs):
            raise ValidationError(
                "target.architectures",
                f"must be a list of architecture names from config.json (got {archs!r})",
            )
        object.__setattr__(self, "architectures", tuple(archs))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TargetModel:
        """``{path, architectures}`` or ``{path, config}`` (a parsed config.json)."""
        if not isinstance(data, Mapping) or "path" not in data:
            raise ValidationError("target", "must be a mapping with path (and architectures)")
        unknown = sorted(set(data) - {"path", "architectures", "config"})
        if unknown:
            raise ValidationError(
                f"target.{unknown[0]}", "unknown key; valid keys: path, architectures, config"
            )
        archs = data.get("architectures")
        config = data.get("config")
        if archs is None and isinstance(config, Mapping):
            archs = config.get("architectures")
        if archs is None:
            archs = ()
        if isinstance(archs, str) or not isinstance(archs, Sequence):
            raise ValidationError("target.architectures", f"must be a list (got {archs!r})")
        return cls(str(data["path"]), tuple(archs))


def launch(
    profile: SpeculativeProfile, engine: Engine, *, target: TargetModel | None = None
) -> tuple[list[str], dict[str, str]]:
    """The engine flags and the environment for ``profile``: one pass, both together.

    Every refusal is a :class:`ValidationError` naming the profile field; the
    ``specops.infra.speculative_launch`` filter and the sweep call this. ``target``:
    the served model, for what its architecture needs (module docstring).
    """
    argv = to_argv(profile, engine, target=target)
    env: dict[str, str] = {}
    if profile.method == "ddtree" and profile.topk is not None:
        env[DDTREE_TOPK_ENV] = str(profile.topk)
    return argv, env


def to_argv(
    profile: SpeculativeProfile, engine: Engine, *, target: TargetModel | None = None
) -> list[str]:
    """The engine flags for ``profile`` (empty for method ``none`` without extra_args)."""
    if engine.family == "sglang":
        argv = _sglang(profile, engine, target)
        owned = _SGLANG_OWNED
    else:
        argv = _vllm(profile, engine)
        owned = _VLLM_OWNED
    _check_extra(profile, engine, owned)
    rendered = argv + list(profile.extra_args)
    engine.flags.check_args(argv, "speculative")  # our own output, against the real list
    return rendered


def to_env(
    profile: SpeculativeProfile, engine: Engine, *, target: TargetModel | None = None
) -> dict[str, str]:
    """Environment variables the profile needs on this engine (after ``to_argv``'s checks)."""
    return launch(profile, engine, target=target)[1]


def sglang_mtp_draft_path(engine: Engine, target: TargetModel | None) -> str | None:
    """The ``--speculative-draft-model-path`` SGLang's NEXTN needs for ``target``, or None.

    None without a target (nothing known), or when the target's architecture is one
    whose draft path SGLang defaults to the model (the flag list's
    ``nextn_self_draft_architectures``); else the target's own path.
    """
    if target is None:
        return None
    defaults = engine.flags.values(SELF_DRAFT_KEY)
    if target.architectures and target.architectures[0] in defaults:
        return None
    return target.path


def _check_extra(profile: SpeculativeProfile, engine: Engine, owned: Mapping[str, str]) -> None:
    engine.flags.check_args(profile.extra_args, "speculative.extra_args")
    for index, arg in enumerate(profile.extra_args):
        name = arg.partition("=")[0]
        if name in owned:
            raise ValidationError(
                f"speculative.extra_args[{index}]",
                f"{name} is rendered from the profile; set speculative.{owned[name]} instead",
            )


def _unsupported(engine: Engine, name: str, value: object, why: str) -> ValidationError:
    return ValidationError(f"speculative.{name}", f"{engine.label} {why} (got {value!r})")


def _sglang(p: SpeculativeProfile, engine: Engine, target: TargetModel | None) -> list[str]:
    if p.method == "none":
        return []
    algorithm = SGLANG_ALGORITHM[p.method]
    valid = engine.flags.values("algorithms")
    if algorithm not in valid:
        methods = [_SGLANG_METHOD[a] for a in valid if a in _SGLANG_METHOD]
        hint = (
            " (an SGLang build from PR #29907 offers DDTREE: inference_engine_git_ref"
            " refs/pull/29907/head; its installed flags are read after the build)"
        ) * (p.method == "ddtree")
        raise ValidationError(
            "speculative.method",
            f"{engine.label} cannot do {p.method!r}{hint}; valid: none, {', '.join(methods)}",
        )
    if p.method == "ngram":
        for name in ("prompt_lookup_min", "prompt_lookup_max"):
            if getattr(p, name) is not None:
                raise _unsupported(
                    engine,
                    name,
                    getattr(p, name),
                    "NGRAM has no prompt-lookup bounds (vLLM only); its knobs are the"
                    " --speculative-ngram-* flags, which extra_args may carry",
                )
    if p.model_mtp_method is not None:
        raise _unsupported(
            engine, "model_mtp_method", p.model_mtp_method, "takes no *_mtp name (vLLM only)"
        )
    argv = ["--speculative-algorithm", algorithm]
    own = sglang_mtp_draft_path(engine, target) if p.method == "mtp" else None
    if p.draft_model is not None or own is not None:
        argv += ["--speculative-draft-model-path", p.draft_model or str(own)]
    if p.draft_model_revision is not None:
        argv += ["--speculative-draft-model-revision", p.draft_model_revision]
    if p.method in CHAIN_METHODS:
        # SGLang needs all three once num_steps is set (it compares topk with ints),
        # and rewrites num_draft_tokens to num_steps + 1 when topk is 1.
        argv += [
            "--speculative-num-steps",
            str(p.num_steps),
            "--speculative-eagle-topk",
            str(p.topk or 1),
            "--speculative-num-draft-tokens",
            str(p.effective_num_draft_tokens),
        ]
    elif p.num_draft_tokens is not None:
        argv += ["--speculative-num-draft-tokens", str(p.num_draft_tokens)]
    argv += _sglang_window(p, engine)
    if p.tree_budget is not None:
        argv += ["--speculative-ddtree-budget", str(p.tree_budget)]
    return argv


def _sglang_window(p: SpeculativeProfile, engine: Engine) -> list[str]:
    """The draft-window flag as this build spells it (0.5.11 and later differ)."""
    if p.draft_window is None:
        return []
    window = engine.flags.window_flag()
    if window is None:
        raise _unsupported(
            engine, "draft_window", p.draft_window,
            "has no draft KV window flag (--speculative-dflash-draft-window-size"
            " or --speculative-draft-window-size)",
        )  # fmt: skip
    return [window, str(p.draft_window)]


def _vllm_method(p: SpeculativeProfile, engine: Engine) -> str:
    flags = engine.flags
    method = p.method
    if method == "mtp" and p.model_mtp_method is not None:
        method = p.model_mtp_method
        mtp = flags.values("mtp_methods")
        if method not in mtp and (mtp or not flags.installed):
            raise _unsupported(
                engine, "model_mtp_method", method, f"knows these MTP methods: {', '.join(mtp)}"
            )
    valid = flags.values("methods")
    # An installed build whose SpeculativeMethod could not be read (the flag set says
    # why under "unread") is left to vLLM's own check at start (the readiness gate).
    if method not in valid and (valid or not flags.installed):
        ours = [
            m for m in ("mtp", "eagle", "eagle3", "dflash", "ngram", "draft_model") if m in valid
        ]
        raise ValidationError(
            "speculative.method",
            f"{engine.label} cannot do {p.method!r}; valid: none, {', '.join(ours)}",
        )
    if p.topk is not None and p.topk != 1:
        raise _unsupported(engine, "topk", p.topk, "drafts chains only: topk must be 1 or unset")
    if p.draft_window is not None:
        raise _unsupported(
            engine,
            "draft_window",
            p.draft_window,
            "has no draft KV window; the drafter's sliding window comes from its"
            " config.json layer_types (check it with `specops profile check-drafter`)",
        )
    return method


def vllm_speculative_config(p: SpeculativeProfile, engine: Engine) -> dict[str, Any] | None:
    """The ``--speculative-config`` object for vLLM, or None for method ``none``."""
    if p.method == "none":
        return None
    config: dict[str, Any] = {"method": _vllm_method(p, engine)}
    if p.draft_model is not None:
        config["model"] = p.draft_model
    if p.draft_model_revision is not None:
        config["revision"] = p.draft_model_revision
    if p.method in CHAIN_METHODS:
        config["num_speculative_tokens"] = p.num_steps
    elif p.num_draft_tokens is None:
        raise ValidationError(
            "speculative.num_draft_tokens",
            f"is required for {p.method!r} on {engine.label}: vLLM needs"
            " num_speculative_tokens = num_draft_tokens - 1 (e.g. 16 for a"
            " DFlash block of 16)",
        )
    else:
        config["num_speculative_tokens"] = p.num_draft_tokens - 1
    if p.prompt_lookup_min is not None:
        config["prompt_lookup_min"] = p.prompt_lookup_min
    if p.prompt_lookup_max is not None:
        config["prompt_lookup_max"] = p.prompt_lookup_max
    fields = engine.flags.values("config_fields")
    unknown = [key for key in config if fields and key not in fields]
    if unknown:  # guards a flag-list update that drops a field
        raise ValidationError(
            "speculative", f"{engine.label} SpeculativeConfig has no field(s) {unknown}"
        )
    return config


def _vllm(p: SpeculativeProfile, engine: Engine) -> list[str]:
    config = vllm_speculative_config(p, engine)
    if config is None:
        return []
    return ["--speculative-config", json.dumps(config, separators=(",", ":"))]


def from_argv(
    argv: Sequence[str], engine: Engine, *, target: TargetModel | None = None
) -> SpeculativeProfile:
    """Read the speculative flags that :func:`to_argv` renders back into a profile.

    Flags the translator does not own become ``extra_args``, in order. An SGLang NEXTN
    line's draft path that is ``target``'s own path was rendered from the target, not
    from the profile, and is not read back into it.
    """
    engine.flags.check_args(argv, "argv")
    if engine.family == "sglang":
        return _from_sglang(list(argv), target)
    return _from_vllm(list(argv))


_SGLANG_INT: Final = {
    "--speculative-num-steps": "num_steps",
    "--speculative-eagle-topk": "topk",
    "--speculative-num-draft-tokens": "num_draft_tokens",
    "--speculative-dflash-draft-window-size": "draft_window",
    "--speculative-draft-window-size": "draft_window",
    "--speculative-ddtree-budget": "tree_budget",
}


def _from_sglang(argv: list[str], target: TargetModel | None = None) -> SpeculativeProfile:
    values: dict[str, Any] = {}
    extra: list[str] = []
    index = 0
    while index < len(argv):
        name = argv[index]
        value = argv[index + 1] if index + 1 < len(argv) else ""
        if name == "--speculative-algorithm":
            values["method"] = _SGLANG_METHOD[value]
        elif name in ("--speculative-draft-model-path", "--speculative-draft-model"):
            values["draft_model"] = value
        elif name == "--speculative-draft-model-revision":
            values["draft_model_revision"] = value
        elif name in _SGLANG_INT:
            values[_SGLANG_INT[name]] = int(value)
        else:
            extra.append(name)
            index += 1
            while index < len(argv) and not argv[index].startswith("--"):
                extra.append(argv[index])
                index += 1
            continue
        index += 2
    if (
        values.get("method") == "mtp"
        and target is not None
        and values.get("draft_model") == target.path
    ):
        del values["draft_model"]
    values["extra_args"] = extra
    return SpeculativeProfile.from_mapping(values)


def _from_vllm(argv: list[str]) -> SpeculativeProfile:
    values: dict[str, Any] = {}
    extra: list[str] = []
    index = 0
    while index < len(argv):
        if argv[index] == "--speculative-config":
            config = json.loads(argv[index + 1])
            method = str(config.pop("method"))
            if method.endswith("_mtp"):
                values["model_mtp_method"] = method
                method = "mtp"
            values["method"] = method
            tokens = config.pop("num_speculative_tokens", None)
            if tokens is not None:
                if method in CHAIN_METHODS:
                    values["num_steps"] = tokens
                else:
                    values["num_draft_tokens"] = tokens + 1
            rename = {"model": "draft_model", "revision": "draft_model_revision"}
            for key, value in config.items():
                values[rename.get(key, key)] = value
            index += 2
        else:
            extra.append(argv[index])
            index += 1
    values["extra_args"] = extra
    return SpeculativeProfile.from_mapping(values)
