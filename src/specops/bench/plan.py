"""The benchmark plan: what to measure, typed and validated before anything is sent.

A plan comes from a YAML/JSON mapping (``load_plan``) or from CLI flags
(``plan_from_mapping`` on the parsed values). Every problem raises
:class:`~specops.errors.ValidationError` naming the field, for example
``concurrency[2]: must be an integer >= 1 (got 0)``.

Defaults follow the issue: concurrency 1, 2, 4, 8, 16, 32, 64, 100 and input context
lengths 1K, 8K, 30K, 60K, 120K (K = 1024 tokens). Against the server's ``max_model_len``
(:func:`fit_context_lengths`, before any request): a length the plan names that does not
fit with its output is refused, naming it and the largest that fits, unless the plan
says ``context_over_limit: clip`` (one cell at the limit, noted) or ``drop`` (left out,
noted); the default lengths of a plan that names none are dropped when they do not fit.

Warm-up: before the first measured cell, every cell of the plan gets ``warmup_waves``
full waves at its concurrency and context (C requests each, at most C in flight), so
the engine's graphs and kernels for each batch shape exist before anything is measured;
each cell then sends its own ``warmup_per_cell`` requests before its measured phase.

Sampling: by default the plan sends no ``temperature`` (the server's model default
applies) and no ``ignore_eos``. Greedy decoding and ``ignore_eos`` make output
degenerate and repetitive, which inflates speculative acceptance and throughput; they
are explicit opt-ins (``temperature: 0``, ``ignore_eos: true``) and the results record
that they were used.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlparse

import yaml

from specops.errors import ValidationError, syntax_problem

__all__ = [
    "API_KINDS",
    "CONTEXT_OVER_LIMIT",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_CONTEXT_LENGTHS",
    "RECORDED_DEFAULTS",
    "ApiKind",
    "HumanEvalPlan",
    "Plan",
    "Roofline",
    "Slo",
    "Timeouts",
    "changed_fields",
    "clip_context_lengths",
    "complete",
    "fit_context_lengths",
    "load_plan",
    "parse_token_count",
    "plan_from_mapping",
    "read_api_key",
]

ApiKind = Literal["completions", "chat", "sglang-generate"]
API_KINDS: tuple[ApiKind, ...] = ("completions", "chat", "sglang-generate")
PROMPT_SETS = ("mixed", "chat", "coding")
# What a context length beyond the server's limit gets: refused before anything is sent,
# one cell at the limit, or left out.
CONTEXT_OVER_LIMIT: tuple[str, ...] = ("refuse", "clip", "drop")
# Plan fields newer than some recorded results, and the value a recorded plan without
# them was measured with: results before the warm-up reached every cell had none.
RECORDED_DEFAULTS: dict[str, Any] = {"warmup_waves": 0}
# Plan fields that change nothing a run measures once the run's lengths are recorded:
# what to do with a length beyond the limit (the recorded lengths say what was done).
# And how often the server's view is sampled: it reads the server, it measures nothing.
_NOT_COMPARED = frozenset({"context_over_limit", "sample_interval_s"})
DEFAULT_CONCURRENCY: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 100)
DEFAULT_CONTEXT_LENGTHS: tuple[int, ...] = tuple(k * 1024 for k in (1, 8, 30, 60, 120))


@dataclass(frozen=True)
class Slo:
    """Service-level objectives; a request meets them when every set bound holds."""

    ttft_ms: float | None = None  # time to first token, per request
    tpot_ms: float | None = None  # time per output token after the first, per request
    e2e_ms: float | None = None  # end-to-end latency, per request

    def is_empty(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None


@dataclass(frozen=True)
class Timeouts:
    """Client timeouts in seconds (httpx.Timeout parts plus a whole-request bound)."""

    connect_s: float = 5.0  # TCP connect; an unreachable server fails within this
    read_s: float = 300.0  # longest silence between two bytes of a stream
    request_s: float = 1800.0  # whole request, first byte sent to last byte read


@dataclass(frozen=True)
class Roofline:
    """What the bandwidth roofline needs; resolved by :mod:`specops.bench.roofline`.

    Bandwidth: ``bandwidth_gb_s`` as given, else the GPU catalogue's bandwidth of
    ``gpu`` (catalogue id, PCI ``vendor:device`` or exact product name) times the cards
    one model replica spans (tensor x pipeline parallel size, from ``tp_size`` /
    ``pp_size`` or the engine's ``engine_args``), at most ``gpu_count``. Bytes per
    token: ``bytes_per_token`` as given, else ``weights`` (the ``model_weights`` module's
    reading of the model's safetensors: active parameters for MoE). ``unknown`` says
    why there is no roofline when the caller knows (e.g. a CPU-only container).
    """

    bandwidth_gb_s: float | None = None  # aggregate GB/s (1e9 bytes/s) one replica reads
    bytes_per_token: float | None = None  # weight bytes read per decode step (active)
    gpu: str | None = None  # GPU catalogue key of the container's cards
    gpu_count: int | None = None  # cards in the container
    tp_size: int | None = None  # tensor-parallel size (None: from engine_args, else 1)
    pp_size: int | None = None  # pipeline-parallel size (None: from engine_args, else 1)
    engine_args: tuple[str, ...] = ()  # the serving engine's extra arguments
    weights: dict[str, Any] | None = None  # specops.infra.model_weights result
    bytes_source: str | None = None  # where a given bytes_per_token comes from
    unknown: str | None = None  # why the hardware or the weights are not known


@dataclass(frozen=True)
class HumanEvalPlan:
    """Optional coding-correctness pass run after the matrix."""

    enabled: bool = False
    limit: int = 164  # first N problems
    max_tokens: int = 512
    timeout_s: float = 10.0  # wall time per problem's test run
    memory_mb: int = 1024  # address-space limit of the test process
    workers: int = 2
    temperature: float = 0.0  # greedy: lossless speculation must match the baseline


@dataclass(frozen=True)
class Plan:
    """A benchmark matrix against one endpoint."""

    base_url: str  # e.g. http://127.0.0.1:8000 (no /v1)
    api: ApiKind = "completions"
    model: str | None = None  # None: the first model the server lists in /v1/models
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    context_lengths: tuple[int, ...] = DEFAULT_CONTEXT_LENGTHS  # input tokens per request
    output_len: int = 256  # max_tokens per request
    requests_per_cell: int = 32  # measured requests per cell, at least (see waves_per_cell)
    waves_per_cell: int = 4  # a cell sends at least waves x concurrency requests (0: off)
    warmup_per_cell: int = 2  # requests sent before each cell's measured phase
    # Full waves (C requests, C in flight) per cell before the first measured cell: the
    # engine meets every batch shape and context of the plan before it is measured. 0: off.
    warmup_waves: int = 1
    # A context length beyond max_model_len - output_len: refuse, clip or drop.
    context_over_limit: str = "refuse"
    # The server's view: its metrics (queue, KV usage) and this machine's GPUs read every
    # this many seconds during each cell (bench.serverview). 0: off.
    sample_interval_s: float = 1.0
    prompt_set: str = "mixed"  # built-in corpus: mixed, chat or coding
    prompt_file: str | None = None  # own UTF-8 text corpus instead of the built-in one
    seed: int = 0  # prompt selection is deterministic in (seed, cell, request index)
    temperature: float | None = None  # None: server default; 0 only as an explicit opt-in
    ignore_eos: bool = False  # opt-in only: inflates acceptance and throughput
    continuous_usage: bool = True  # ask vLLM/SGLang for usage in every chunk
    tokenizer_path: str | None = None  # local tokenizer.json when the server has no /tokenize
    api_key_env: str | None = None  # name of an env var holding a bearer token
    # A file holding the server's API key (mode 0600): the bearer token of every request.
    api_key_file: str | None = None
    slo: Slo = field(default_factory=Slo)
    timeouts: Timeouts = field(default_factory=Timeouts)
    roofline: Roofline | None = None
    humaneval: HumanEvalPlan = field(default_factory=HumanEvalPlan)

    def requests_for(self, concurrency: int) -> int:
        """Measured requests of a cell at ``concurrency``: enough to hold it for
        ``waves_per_cell`` waves, never fewer than ``requests_per_cell``."""
        return max(self.requests_per_cell, self.waves_per_cell * concurrency)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["concurrency"] = list(self.concurrency)
        data["context_lengths"] = list(self.context_lengths)
        if self.roofline is not None:
            data["roofline"]["engine_args"] = list(self.roofline.engine_args)
        return data


def read_api_key(path: str, field_name: str = "api_key_file") -> str:
    """The API key in ``path``: a file only its owner may read (0600 or stricter), one
    line. The key is never printed; errors name the file and what to fix."""
    file = Path(path)
    try:
        mode = file.stat().st_mode
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError(field_name, f"cannot read {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise ValidationError(
            field_name,
            f"{path} is readable by others (mode {mode & 0o777:04o}); chmod 0600 it",
        )
    key = text.strip()
    if not key or "\n" in key:
        raise ValidationError(field_name, f"{path} must hold the key on one line")
    return key


def parse_token_count(value: object, where: str) -> int:
    """``1024``, ``"1K"`` (1024), ``"8k"`` or ``"2M"`` -> tokens; else ValidationError."""
    if isinstance(value, bool):
        raise ValidationError(where, f"must be a token count like 1024 or 8K (got {value!r})")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        text = value.strip().upper()
        scale = 1
        if text.endswith("K"):
            scale, text = 1024, text[:-1]
        elif text.endswith("M"):
            scale, text = 1024 * 1024, text[:-1]
        try:
            number = int(text) * scale
        except ValueError:
            raise ValidationError(
                where, f"must be a token count like 1024 or 8K (got {value!r})"
            ) from None
    else:
        raise ValidationError(where, f"must be a token count like 1024 or 8K (got {value!r})")
    if number < 1:
        raise ValidationError(where, f"must be >= 1 token (got {value!r})")
    return number


def _int(data: dict[str, Any], key: str, default: int, minimum: int, where: str = "") -> int:
    name = f"{where}{key}"
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValidationError(name, f"must be an integer >= {minimum} (got {value!r})")
    return value


def _float(
    data: dict[str, Any], key: str, default: float | None, where: str = "", positive: bool = True
) -> float | None:
    name = f"{where}{key}"
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(name, f"must be a number (got {value!r})")
    if positive and value <= 0:
        raise ValidationError(name, f"must be > 0 (got {value!r})")
    if not positive and value < 0:
        raise ValidationError(name, f"must be >= 0 (got {value!r})")
    return float(value)


def _bool(data: dict[str, Any], key: str, default: bool, where: str = "") -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ValidationError(f"{where}{key}", f"must be true or false (got {value!r})")
    return value


def _opt_str(data: dict[str, Any], key: str, where: str = "") -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{where}{key}", f"must be a non-empty string (got {value!r})")
    return value


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise ValidationError(key, f"must be a mapping (got {type(value).__name__})")
    return cast(dict[str, Any], value)


def _check_keys(data: dict[str, Any], allowed: set[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            valid = ", ".join(sorted(allowed))
            raise ValidationError(f"{where}{key}", f"unknown field; valid fields: {valid}")


def _list(data: dict[str, Any], key: str) -> list[object] | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple) or not value:
        raise ValidationError(key, f"must be a non-empty list (got {value!r})")
    return list(value)


def _base_url(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError("base_url", "must be an http(s) URL like http://127.0.0.1:8000")
    try:
        parsed = urlparse(value)
        parsed.port  # noqa: B018  (raises on a port out of 0-65535 or not a number)
    except ValueError:
        parsed = urlparse("")  # a malformed host ([::1) or port: refused below
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValidationError(
            "base_url", f"must be an http(s) URL like http://127.0.0.1:8000 (got {value!r})"
        )
    url = value.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def plan_from_mapping(data: dict[str, Any]) -> Plan:
    """Validate a plan mapping (YAML/JSON/CLI); errors name the field."""
    plan_fields = set(Plan.__dataclass_fields__)
    _check_keys(data, plan_fields, "")
    if "base_url" not in data:
        raise ValidationError("base_url", "is required (e.g. http://127.0.0.1:8000)")
    base_url = _base_url(data["base_url"])
    api = data.get("api", "completions")
    if api not in API_KINDS:
        raise ValidationError("api", f"must be one of {', '.join(API_KINDS)} (got {api!r})")

    concurrency = DEFAULT_CONCURRENCY
    raw_conc = _list(data, "concurrency")
    if raw_conc is not None:
        levels: list[int] = []
        for i, item in enumerate(raw_conc):
            try:
                level = int(str(item).strip()) if not isinstance(item, bool) else 0
            except ValueError:
                level = 0
            if level < 1:
                raise ValidationError(
                    f"concurrency[{i}]", f"must be an integer >= 1 (got {item!r})"
                )
            levels.append(level)
        concurrency = tuple(sorted(set(levels)))

    contexts = DEFAULT_CONTEXT_LENGTHS
    raw_ctx = _list(data, "context_lengths")
    if raw_ctx is not None:
        contexts = tuple(
            sorted(
                {
                    parse_token_count(
                        item.strip() if isinstance(item, str) else item, f"context_lengths[{i}]"
                    )
                    for i, item in enumerate(raw_ctx)
                }
            )
        )

    slo_data = _section(data, "slo")
    _check_keys(slo_data, set(Slo.__dataclass_fields__), "slo.")
    slo = Slo(
        ttft_ms=_float(slo_data, "ttft_ms", None, "slo."),
        tpot_ms=_float(slo_data, "tpot_ms", None, "slo."),
        e2e_ms=_float(slo_data, "e2e_ms", None, "slo."),
    )
    t_data = _section(data, "timeouts")
    _check_keys(t_data, set(Timeouts.__dataclass_fields__), "timeouts.")
    defaults = Timeouts()
    timeouts = Timeouts(
        connect_s=cast(float, _float(t_data, "connect_s", defaults.connect_s, "timeouts.")),
        read_s=cast(float, _float(t_data, "read_s", defaults.read_s, "timeouts.")),
        request_s=cast(float, _float(t_data, "request_s", defaults.request_s, "timeouts.")),
    )
    roofline = _roofline(_section(data, "roofline"))
    h_data = _section(data, "humaneval")
    _check_keys(h_data, set(HumanEvalPlan.__dataclass_fields__), "humaneval.")
    hdef = HumanEvalPlan()
    humaneval = HumanEvalPlan(
        enabled=_bool(h_data, "enabled", hdef.enabled, "humaneval."),
        limit=_int(h_data, "limit", hdef.limit, 1, "humaneval."),
        max_tokens=_int(h_data, "max_tokens", hdef.max_tokens, 1, "humaneval."),
        timeout_s=cast(float, _float(h_data, "timeout_s", hdef.timeout_s, "humaneval.")),
        memory_mb=_int(h_data, "memory_mb", hdef.memory_mb, 64, "humaneval."),
        workers=_int(h_data, "workers", hdef.workers, 1, "humaneval."),
        temperature=cast(
            float, _float(h_data, "temperature", hdef.temperature, "humaneval.", positive=False)
        ),
    )
    prompt_set = data.get("prompt_set", "mixed")
    if prompt_set not in PROMPT_SETS:
        raise ValidationError(
            "prompt_set", f"must be one of {', '.join(PROMPT_SETS)} (got {prompt_set!r})"
        )
    prompt_file = _opt_str(data, "prompt_file")
    if prompt_file is not None and not Path(prompt_file).is_file():
        raise ValidationError("prompt_file", f"no such file: {prompt_file}")
    seed = _int(data, "seed", 0, 0)
    over = data.get("context_over_limit", "refuse" if raw_ctx is not None else "drop")
    if over not in CONTEXT_OVER_LIMIT:
        raise ValidationError(
            "context_over_limit",
            f"must be one of {', '.join(CONTEXT_OVER_LIMIT)} (got {over!r})",
        )
    return Plan(
        base_url=base_url,
        api=cast(ApiKind, api),
        model=_opt_str(data, "model"),
        concurrency=concurrency,
        context_lengths=contexts,
        output_len=_int(data, "output_len", 256, 1),
        requests_per_cell=_int(data, "requests_per_cell", 32, 1),
        waves_per_cell=_int(data, "waves_per_cell", 4, 0),
        warmup_per_cell=_int(data, "warmup_per_cell", 2, 0),
        warmup_waves=_int(data, "warmup_waves", 1, 0),
        context_over_limit=str(over),
        sample_interval_s=cast(float, _float(data, "sample_interval_s", 1.0, positive=False)),
        prompt_set=prompt_set,
        prompt_file=prompt_file,
        seed=seed,
        temperature=_float(data, "temperature", None, positive=False),
        ignore_eos=_bool(data, "ignore_eos", False),
        continuous_usage=_bool(data, "continuous_usage", True),
        tokenizer_path=_opt_str(data, "tokenizer_path"),
        api_key_env=_opt_str(data, "api_key_env"),
        api_key_file=_opt_str(data, "api_key_file"),
        slo=slo,
        timeouts=timeouts,
        roofline=roofline,
        humaneval=humaneval,
    )


def _roofline(r_data: dict[str, Any]) -> Roofline | None:
    """The plan's ``roofline`` section; empty strings and nulls count as not given."""
    r_data = {k: v for k, v in r_data.items() if v is not None and v != ""}
    if not r_data:
        return None
    _check_keys(r_data, set(Roofline.__dataclass_fields__), "roofline.")
    engine_args = r_data.get("engine_args", [])
    if not isinstance(engine_args, list | tuple) or not all(
        isinstance(a, str | int | float) for a in engine_args
    ):
        raise ValidationError(
            "roofline.engine_args", f"must be a list of strings (got {engine_args!r})"
        )
    weights = r_data.get("weights")
    if weights is not None and not isinstance(weights, dict):
        raise ValidationError(
            "roofline.weights", f"must be the model_weights module's result (got {weights!r})"
        )
    sizes = {k: _int(r_data, k, 1, 1, "roofline.") if k in r_data else None
             for k in ("gpu_count", "tp_size", "pp_size")}  # fmt: skip
    return Roofline(
        bandwidth_gb_s=_float(r_data, "bandwidth_gb_s", None, "roofline."),
        bytes_per_token=_float(r_data, "bytes_per_token", None, "roofline."),
        gpu=_opt_str(r_data, "gpu", "roofline."),
        gpu_count=sizes["gpu_count"],
        tp_size=sizes["tp_size"],
        pp_size=sizes["pp_size"],
        engine_args=tuple(str(a) for a in engine_args),
        weights=cast(dict[str, Any], weights) if weights is not None else None,
        bytes_source=_opt_str(r_data, "bytes_source", "roofline."),
        unknown=_opt_str(r_data, "unknown", "roofline."),
    )


def load_plan(
    path: str | Path,
    overrides: dict[str, Any] | None = None,
    *,
    save_to: str | Path | None = None,
) -> Plan:
    """Read a YAML (or JSON) plan file, ``-`` for standard input; ``overrides`` (from CLI
    flags) win. ``save_to``: also write the plan as read (once it validates) there."""
    stdin = str(path) == "-"
    file = Path(path)
    name = "standard input" if stdin else str(file)
    try:
        text = sys.stdin.read() if stdin else file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError("plan", f"cannot read {name}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValidationError("plan", f"{name} is not UTF-8 text") from None
    try:
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ValidationError(
            "plan", f"{name} is not valid YAML/JSON: {syntax_problem(exc)}"
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValidationError("plan", f"{name} must hold a mapping of plan fields")
    merged = dict(cast(dict[str, Any], data))
    merged.update({k: v for k, v in (overrides or {}).items() if v is not None})
    plan = plan_from_mapping(merged)
    if save_to is not None:
        target = Path(save_to)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
    return plan


def clip_context_lengths(
    contexts: tuple[int, ...], output_len: int, max_model_len: int | None
) -> tuple[tuple[int, ...], list[str]]:
    """Clip input lengths so input + output fits ``max_model_len``.

    A length that does not fit becomes ``max_model_len - output_len`` (once); returns the
    lengths to run and one note per change, for the results.
    """
    if max_model_len is None:
        return contexts, []
    limit = max_model_len - output_len
    if limit < 1:
        raise ValidationError(
            "output_len",
            f"{output_len} leaves no room for input in the server's max_model_len {max_model_len}",
        )
    kept: list[int] = []
    notes: list[str] = []
    for ctx in contexts:
        if ctx <= limit:
            kept.append(ctx)
        else:
            notes.append(
                f"context {ctx} clipped to {limit} (max_model_len {max_model_len} - "
                f"output_len {output_len})"
            )
            kept.append(limit)
    return tuple(sorted(set(kept))), notes


def fit_context_lengths(
    contexts: tuple[int, ...], output_len: int, max_model_len: int | None, over_limit: str
) -> tuple[tuple[int, ...], list[str]]:
    """The lengths a run measures against ``max_model_len`` and one note per change.

    ``over_limit``: ``refuse`` raises ValidationError naming the first length that does
    not fit (with its output) and the largest that does; ``clip`` makes it one cell at
    the limit (:func:`clip_context_lengths`); ``drop`` leaves it out (every length too
    long: refused, there would be nothing to measure).
    """
    if max_model_len is None:
        return contexts, []
    if over_limit == "clip":
        return clip_context_lengths(contexts, output_len, max_model_len)
    limit = max_model_len - output_len
    if limit < 1:
        raise ValidationError(
            "output_len",
            f"{output_len} leaves no room for input in the server's max_model_len {max_model_len}",
        )
    too_long = [(i, c) for i, c in enumerate(contexts) if c > limit]
    if not too_long:
        return contexts, []
    if over_limit == "refuse" or len(too_long) == len(contexts):
        i, ctx = too_long[0]
        raise ValidationError(
            f"context_lengths[{i}]",
            f"{ctx} tokens + output_len {output_len} exceed the server's max_model_len"
            f" {max_model_len} (the longest input that fits: {limit}); give lengths up to"
            f" {limit}, or set context_over_limit: clip (one cell at {limit}) or drop"
            " (leave them out)",
        )
    kept = tuple(c for c in contexts if c <= limit)
    notes = [
        f"context {c} left out: it does not fit max_model_len {max_model_len} with"
        f" output_len {output_len} (context_over_limit: drop)"
        for _, c in too_long
    ]
    return kept, notes


def complete(plan: Plan, model: str, max_model_len: int | None) -> tuple[Plan, list[str]]:
    """The plan a run measures against a server that serves ``model`` with that
    ``max_model_len``: its model filled in when it names none, its context lengths fitted
    (:func:`fit_context_lengths`: a length too long is refused unless the plan says to
    clip or drop it); and one note per clipped or dropped length."""
    contexts, notes = fit_context_lengths(
        plan.context_lengths, plan.output_len, max_model_len, plan.context_over_limit
    )
    return replace(plan, model=plan.model or model, context_lengths=contexts), notes


def changed_fields(recorded: dict[str, Any], plan: Plan) -> list[str]:
    """The top-level fields where ``plan`` differs from a plan recorded in results (as
    JSON read it back), sorted. A recorded plan older than a field was measured with
    its :data:`RECORDED_DEFAULTS` value; ``context_over_limit`` is not compared (the
    recorded lengths say what was measured)."""
    now = json.loads(json.dumps(plan.to_dict()))
    was = {**RECORDED_DEFAULTS, **recorded}
    keys = (set(now) | set(was)) - _NOT_COMPARED
    return sorted(k for k in keys if now.get(k) != was.get(k))
