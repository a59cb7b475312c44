"""Every profile field is rendered or refused by every engine build: none is dropped.

For each field of :class:`SpeculativeProfile`, each engine of the descriptor
(``module_utils/engine/descriptor.py``) and each recorded flag-list version (SGLang also as a
PR #29907 DDTree build), the field is set to other valid values on valid base profiles
(the docs table's examples and a few more) whose method takes it. At least one such
change must either change what ``launch`` returns (argv or environment) or be refused
with a message that names the field. A field the translator never reads leaves argv and
environment as they were and fails here.

``test_a_field_the_translator_ignores_is_caught`` plants such a field (a subclass of
the profile with one more integer field, allowed for method mtp) and proves the check
reports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, get_type_hints

import pytest
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import ENGINES
from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError
from ansible_collections.specops.infra.plugins.module_utils.speculative import profile as sp
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import (
    Engine,
    known_versions,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    METHODS,
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import launch

from specops.speculative.table import EXAMPLES

# More bases than the table shows, so a field has a profile where changing it shows
# (on a chain with topk 1, num_draft_tokens must equal num_steps + 1: a tree shows it).
MORE_BASES: tuple[Mapping[str, Any], ...] = (
    {"method": "mtp", "num_steps": 2, "topk": 1, "num_draft_tokens": 3},
    {"method": "eagle", "draft_model": "DRAFT", "num_steps": 2, "topk": 4, "num_draft_tokens": 6},
    {"method": "draft_model", "draft_model": "DRAFT", "num_steps": 2,
     "draft_model_revision": "main"},
    {"method": "dflash", "draft_model": "DRAFT", "num_draft_tokens": 8, "topk": 1},
    {"method": "ddtree", "draft_model": "DRAFT", "tree_budget": 8},
)  # fmt: skip
BASES = (*EXAMPLES, *MORE_BASES)

INTS = (1, 2, 3, 4, 5, 6, 7, 8, 16, 4096)
STRINGS = ("qwen3_5_mtp", "deepseek_mtp", "org/other_mtp")


def builds() -> list[Engine]:
    """Every engine of the descriptor at every recorded version (SGLang also +ddtree)."""
    out = []
    for name, desc in ENGINES.items():
        for version in known_versions(name):
            out.append(Engine(name, version))
            for capability in desc.capabilities:
                out.append(Engine(name, version, frozenset({capability})))
    return out


def _values(kind: Any, engine: Engine) -> tuple[Any, ...]:
    """Valid-looking values of a field's type (the profile decides which are valid)."""
    if kind == int | None:
        return INTS
    if kind == str | None:
        return STRINGS
    if kind is str:
        return METHODS
    if kind == tuple[str, ...]:
        # A flag of this build that takes no value and is not the profile's own.
        flag = next(
            n
            for n, spec in sorted(engine.flags.flags.items())
            if spec.nargs == "0" and not n.startswith(("--speculative", "--spec-"))
        )
        return ((flag,),)
    raise AssertionError(f"no test values for a profile field of type {kind!r}: add them here")


def _build(cls: type[SpeculativeProfile], data: Mapping[str, Any]) -> SpeculativeProfile | None:
    values = dict(data)
    if "extra_args" in values:
        values["extra_args"] = tuple(values["extra_args"])
    try:
        return cls(**values)
    except ValidationError:
        return None


def _outcome(profile: SpeculativeProfile, engine: Engine) -> tuple[str, Any]:
    try:
        argv, env = launch(profile, engine)
    except ValidationError as exc:
        return "refused", exc.field
    return "rendered", (tuple(argv), tuple(sorted(env.items())))


def _variants(
    cls: type[SpeculativeProfile], name: str, engine: Engine
) -> Iterator[tuple[SpeculativeProfile, SpeculativeProfile]]:
    """(base, base with ``name`` changed), both valid profiles, the base renderable."""
    kind = get_type_hints(cls)[name]
    for data in BASES:
        base = _build(cls, data)
        if base is None or _outcome(base, engine)[0] != "rendered":
            continue
        for value in _values(kind, engine):
            if value == getattr(base, name):
                continue
            changed = _build(cls, {**dataclasses.asdict(base), name: value})
            if changed is not None:
                yield base, changed


def silent_fields(cls: type[SpeculativeProfile], engine: Engine) -> dict[str, str]:
    """Fields of ``cls`` that ``engine`` neither renders nor refuses by name, with why
    ("no valid profile ..." when no base this build renders takes the field)."""
    silent: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        tried = 0
        for tried, (base, changed) in enumerate(_variants(cls, f.name, engine), 1):  # noqa: B007
            before, after = _outcome(base, engine), _outcome(changed, engine)
            if after[0] == "rendered" and after != before:
                break
            field = str(after[1]) if after[0] == "refused" else ""
            if field == f"speculative.{f.name}" or field.startswith(f"speculative.{f.name}["):
                break
        else:
            silent[f.name] = (
                f"{tried} valid change(s), none changed argv/env or was refused naming it"
                if tried
                else "no valid profile this build renders takes it"
            )
    return silent


# A field no base of a build can carry (ddtree's tree_budget on a release without
# DDTree, draft_window on vLLM where only the window-less methods render) is still
# checked on the builds that can; every field must be checked on at least one.
def test_every_field_is_checked_on_some_build() -> None:
    covered: dict[str, int] = {f.name: 0 for f in dataclasses.fields(SpeculativeProfile)}
    for engine in builds():
        silent = silent_fields(SpeculativeProfile, engine)
        for name in covered:
            if name not in silent:
                covered[name] += 1
    assert [n for n, count in covered.items() if count == 0] == []


def dropped_fields(cls: type[SpeculativeProfile], engine: Engine) -> dict[str, str]:
    """Fields changed without effect. "No valid profile" is allowed: the build cannot
    serve any method taking the field (the method is refused by name there)."""
    silent = silent_fields(cls, engine)
    return {n: why for n, why in silent.items() if not why.startswith("no valid profile")}


@pytest.mark.parametrize("engine", builds(), ids=lambda e: e.label)
def test_every_field_is_rendered_or_refused(engine: Engine) -> None:
    dropped = dropped_fields(SpeculativeProfile, engine)
    assert dropped == {}, f"{engine.label}: fields neither rendered nor refused: {dropped}"


@dataclasses.dataclass(frozen=True)
class _PlantedProfile(SpeculativeProfile):
    """The profile with a field the translator does not know."""

    draft_temperature: int | None = None


def test_a_field_the_translator_ignores_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = dict(sp._ALLOWED)
    allowed["mtp"] = allowed["mtp"] | {"draft_temperature"}
    monkeypatch.setattr(sp, "_ALLOWED", allowed)
    for engine in (Engine("sglang", known_versions("sglang")[-1]), Engine("vllm", "0.32.0")):
        dropped = dropped_fields(_PlantedProfile, engine)
        assert list(dropped) == ["draft_temperature"], (engine.label, dropped)
        assert "none changed argv/env or was refused naming it" in dropped["draft_temperature"]
        # The real profile on the same build: nothing dropped (the check is not blind).
        assert dropped_fields(SpeculativeProfile, engine) == {}
