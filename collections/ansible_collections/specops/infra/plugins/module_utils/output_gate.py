"""The lossless-output gate: greedy output against a recorded reference, and a loop detector.

Speculative decoding is lossless: with greedy decoding (temperature 0) a correct
drafter/verifier pair produces the target model's own tokens. A broken one (a drafter
whose sliding window was flattened, an engine build that corrupts the verify step, a
server flag that changes sampling) still answers ``/health`` and a one-token
completion, so readiness alone lets it through. This gate decodes a small fixed prompt
set greedily and

1. compares each output with the node's *reference* (the same prompts decoded without
   speculation, ``method: none``, or by the server that ran before the change): the
   token match rate (common prefix / reference length, averaged over the prompts) must
   reach ``threshold``. It is not 1.0 because floating point differs between batch
   shapes: a speculative verify pass scores several positions at once and a near tie
   between two tokens can flip (see docs/speculative.md for the measured rates);
2. runs a degeneration detector on every output, with or without a reference: one
   token repeated ``max_run`` times in a row, or a cycle of at most ``max_period``
   tokens repeated over ``min_span`` tokens (the seeds' SGLang 0.5.9 on a GDN hybrid
   answered ``lambda lambda lambda ...``). A prompt whose reference output has the same
   loop is left to the match check (the model itself loops there);
3. with ``load`` > 0, decodes the same prompts again inside a loaded batch (``load``
   other streamed requests in flight, :func:`decode_under_load`) and compares those
   outputs with the reference too. Drafts and the verify pass are batched: an ngram or
   draft-model server's acceptance differed between clients at C >= 4 on an H200, and a
   server whose output changes only inside a batch passes the one-at-a-time check.

Token ids come from ``return_token_ids``: vLLM (0.32: ``CompletionRequest.return_token_ids``)
and SGLang (main: ``python/sglang/srt/entrypoints/openai/protocol.py``, the request field
and ``token_ids`` in each choice) add ``token_ids`` to each choice; both request models
ignore fields they do not know, so a release without it answers with text only, and is
compared on text units (words, spaces, punctuation), which the verdict says. Both list
the served model with its path as ``root`` in ``/v1/models`` (vLLM; SGLang's
``ModelCard.root``), which keys a reference taken from a running server.

Stdlib only: it runs in the container (the ``service_unit`` step) and on the controller
(rollout smoke gate, sweep).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
import urllib.error
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url
from ansible_collections.specops.infra.plugins.module_utils.atomic_file import write_atomic

__all__ = [
    "PROMPTS",
    "Decoded",
    "GateConfig",
    "GateVerdict",
    "LoadedDecode",
    "NodeGate",
    "Reference",
    "decode",
    "decode_under_load",
    "degeneration",
    "evaluate",
    "load_reference",
    "match_rate",
    "prompts_digest",
    "save_reference",
]

# A small fixed set: code (what the seeds served most), prose, a list and a question.
# Changing it makes every stored reference stale (their prompts_sha256 differs).
PROMPTS: tuple[str, ...] = (
    "def fibonacci(n):\n    ",
    "import os\n\ndef list_python_files(root):\n    ",
    "class Stack:\n    def __init__(self):\n        ",
    "The three most important properties of a sorting algorithm are",
    "Q: What does the HTTP status code 404 mean?\nA:",
    "1. Preheat the oven.\n2.",
)
DEFAULT_MAX_TOKENS = 48
MAX_LOAD = 256  # requests in flight around the prompts in the loaded-batch check
# What the loaded-batch check's other requests ask for (varied, so no two are one prompt).
_FILLER = "Write a long, detailed technical essay about topic number {n}: distributed systems, "
_TEXT_UNIT = re.compile(r"\w+|\s+|[^\w\s]", re.UNICODE)


@dataclass(frozen=True)
class Decoded:
    """One prompt's greedy output: its text and, when the engine returns them, token ids."""

    prompt: str
    text: str
    token_ids: list[int] | None = None
    finish_reason: str = ""

    def units(self, tokens: bool) -> list[Any]:
        if tokens and self.token_ids is not None:
            return list(self.token_ids)
        return _TEXT_UNIT.findall(self.text)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decoded:
        ids = data.get("token_ids")
        return cls(
            prompt=str(data["prompt"]),
            text=str(data["text"]),
            token_ids=[int(i) for i in ids] if isinstance(ids, list) else None,
            finish_reason=str(data.get("finish_reason", "")),
        )


@dataclass(frozen=True)
class GateConfig:
    """What the gate decodes and the thresholds it applies (inventory-tunable)."""

    threshold: float = 0.9
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_run: int = 12
    max_period: int = 4
    min_span: int = 24
    prompts: tuple[str, ...] = PROMPTS
    request_timeout: float = 120.0
    # False only for a model whose greedy output loops by construction (the lab's
    # random-weight tiny model); the match with the reference is still checked.
    detect_loops: bool = True
    # Also decode the prompts inside a batch of this many other requests (0: off).
    load: int = 0

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> GateConfig:
        """Inventory-shaped settings (unknown keys are an error naming them)."""
        data = dict(data or {})
        valid = {f for f in cls.__dataclass_fields__ if f not in ("prompts", "request_timeout")}
        unknown = sorted(set(data) - valid)
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; valid: {', '.join(sorted(valid))}")
        return cls(**data)

    def problems(self) -> list[str]:
        out = []
        if not 0.0 < self.threshold <= 1.0:
            out.append(f"threshold: must be in (0, 1] (got {self.threshold!r})")
        for name, low in (("max_tokens", 8), ("max_run", 2), ("max_period", 1), ("min_span", 4)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                out.append(f"{name}: must be an integer >= {low} (got {value!r})")
        load = self.load
        if not isinstance(load, int) or isinstance(load, bool) or not 0 <= load <= MAX_LOAD:
            out.append(f"load: must be an integer from 0 to {MAX_LOAD} (got {load!r})")
        if not self.prompts or not all(isinstance(p, str) and p for p in self.prompts):
            out.append("prompts: must be a non-empty list of non-empty strings")
        return out


@dataclass
class Reference:
    """The outputs a speculative server must reproduce, with what they were taken from."""

    served_model_name: str
    model: str
    prompts_sha256: str
    max_tokens: int
    source: str
    outputs: list[Decoded]
    recorded_at: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reference:
        return cls(
            served_model_name=str(data["served_model_name"]),
            model=str(data["model"]),
            prompts_sha256=str(data["prompts_sha256"]),
            max_tokens=int(data["max_tokens"]),
            source=str(data["source"]),
            outputs=[Decoded.from_dict(o) for o in data["outputs"]],
            recorded_at=str(data.get("recorded_at", "")),
        )

    def fits(self, model: str, config: GateConfig) -> str | None:
        """None when this reference applies to ``model`` and ``config``, else why not."""
        if self.model != model:
            return f"it was recorded for model {self.model}, not {model}"
        if self.prompts_sha256 != prompts_digest(config.prompts):
            return "its prompt set differs from the gate's"
        if self.max_tokens != config.max_tokens:
            return f"it was decoded with max_tokens {self.max_tokens}, not {config.max_tokens}"
        return None


@dataclass
class GateVerdict:
    """``ok`` or the failed ``check`` (``lossless`` or ``degeneration``) with the reason."""

    ok: bool
    check: str | None
    message: str
    match_rate: float | None = None
    per_prompt: list[float] = field(default_factory=list)
    compared_on: str = ""
    reference_source: str = ""
    degenerate: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    # The loaded-batch check (config.load > 0): its own verdict and how many requests
    # were still in flight when the last gate prompt finished.
    under_load: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def prompts_digest(prompts: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(list(prompts)).encode()).hexdigest()


def _open(url: str, body: dict[str, Any], api_key: str | None, accept: str, timeout: float) -> Any:
    """A JSON POST to the server, with its API key when it has one, through Ansible's
    open_url (the proxy environment and TLS verification, as every module has them)."""
    headers = {"Content-Type": "application/json", "Accept": accept}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return open_url(url, data=json.dumps(body).encode(), headers=headers, timeout=timeout)


def _post(url: str, body: dict[str, Any], timeout: float, api_key: str | None) -> dict[str, Any]:
    try:
        with _open(url, body, api_key, "application/json", timeout) as resp:
            data = json.loads(resp.read().decode("utf-8", errors="replace"))
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", errors="replace")[:300]
        raise RuntimeError(f"{url} answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError, TimeoutError, ValueError, UrlConnectionError) as exc:
        raise RuntimeError(f"{url}: {getattr(exc, 'reason', exc)}") from None
    if not isinstance(data, dict):
        raise RuntimeError(f"{url}: not a JSON object")
    return data


def decode(
    base_url: str,
    served_model_name: str,
    config: GateConfig,
    *,
    api_key: str | None = None,
) -> list[Decoded]:
    """Decode every gate prompt greedily, one request at a time (RuntimeError on failure)."""
    url = base_url.rstrip("/") + "/v1/completions"
    out = []
    for prompt in config.prompts:
        data = _post(
            url,
            {
                "model": served_model_name,
                "prompt": prompt,
                "max_tokens": config.max_tokens,
                "temperature": 0,
                "seed": 0,
                "return_token_ids": True,
            },
            config.request_timeout,
            api_key,
        )
        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise RuntimeError(f"{url}: no choice in the answer: {str(data)[:300]}") from None
        ids = choice.get("token_ids")
        out.append(
            Decoded(
                prompt=prompt,
                text=str(choice.get("text", "")),
                token_ids=[int(i) for i in ids] if isinstance(ids, list) else None,
                finish_reason=str(choice.get("finish_reason") or ""),
            )
        )
    return out


@dataclass
class LoadedDecode:
    """The gate prompts decoded inside a batch: outputs, and the batch it really had."""

    outputs: list[Decoded]
    load: int  # other requests started
    started: int  # of those, how many had streamed a first token before the prompts went
    in_flight: int  # of those, how many were still streaming when the last prompt returned


# A filler streams requests back to back until the gate prompts are back; this bounds it
# in count too (each request is bounded by the gate's request timeout).
_FILLER_MAX_REQUESTS = 64


def _stream_filler(
    url: str,
    body: dict[str, Any],
    api_key: str | None,
    *,
    timeout: float,
    first: threading.Event,
    stop: threading.Event,
    done: threading.Event,
) -> None:
    try:
        for _attempt in range(_FILLER_MAX_REQUESTS):
            if stop.is_set():
                break
            with _open(url, body, api_key, "text/event-stream", timeout) as resp:
                for line in resp:
                    if line.startswith(b"data:"):
                        first.set()
                    # Closing the stream early aborts the request on the server.
                    if stop.is_set() or line.strip() == b"data: [DONE]":
                        break
    except (urllib.error.URLError, OSError, TimeoutError, ValueError, UrlConnectionError):
        pass  # load, not a measurement: the prompts' own answers decide
    finally:
        first.set()
        done.set()


def decode_under_load(
    base_url: str,
    served_model_name: str,
    config: GateConfig,
    *,
    load: int,
    api_key: str | None = None,
) -> LoadedDecode:
    """Decode every gate prompt at once while ``load`` other requests decode.

    Each of the ``load`` others is a stream of requests sent back to back (``ignore_eos``,
    four times the gate's tokens each; vLLM and SGLang both take it) until the prompts are
    back, then its open stream is closed (the server aborts that request): the batch
    stays loaded however fast the server decodes and however late this process gets the
    CPU. ``started`` counts the others that streamed before the prompts went and had not
    failed; ``in_flight`` those still streaming when the last prompt returned.
    RuntimeError when a gate prompt cannot be decoded.
    """
    url = base_url.rstrip("/") + "/v1/completions"
    firsts = [threading.Event() for _stream in range(load)]
    dones = [threading.Event() for _stream in range(load)]
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=load + len(config.prompts)) as pool:
        try:
            for n in range(load):
                body = {
                    "model": served_model_name, "prompt": _FILLER.format(n=n),
                    "max_tokens": config.max_tokens * 4 + 64, "temperature": 0, "stream": True,
                    "ignore_eos": True,
                }  # fmt: skip
                pool.submit(
                    _stream_filler, url, body, api_key, timeout=config.request_timeout,
                    first=firsts[n], stop=stop, done=dones[n],
                )  # fmt: skip
            deadline = time.monotonic() + config.request_timeout
            for event in firsts:
                event.wait(max(0.0, deadline - time.monotonic()))
            started = sum(1 for n in range(load) if firsts[n].is_set() and not dones[n].is_set())
            futures = [
                pool.submit(
                    decode,
                    base_url,
                    served_model_name,
                    replace_prompts(config, (p,)),
                    api_key=api_key,
                )
                for p in config.prompts
            ]
            outputs = [f.result()[0] for f in futures]
            in_flight = sum(1 for d in dones if not d.is_set())
        finally:
            stop.set()  # the fillers close their streams; the pool then waits for them
    return LoadedDecode(outputs, load, started, in_flight)


def replace_prompts(config: GateConfig, prompts: tuple[str, ...]) -> GateConfig:
    """``config`` with another prompt set."""
    return GateConfig(**{**asdict(config), "prompts": prompts})


def match_rate(reference: Sequence[Any], candidate: Sequence[Any]) -> float:
    """Common prefix length over the reference's length (1.0 for two empty outputs)."""
    if not reference:
        return 1.0 if not candidate else 0.0
    same = 0
    for ref, cand in zip(reference, candidate, strict=False):
        if ref != cand:
            break
        same += 1
    return same / len(reference)


def degeneration(units: Sequence[Any], config: GateConfig) -> str | None:
    """Why ``units`` loop (one unit repeated, or a short cycle over a long span), or None."""
    if not config.detect_loops:
        return None
    run, longest, where = 1, 1, 0
    for index in range(1, len(units)):
        run = run + 1 if units[index] == units[index - 1] else 1
        if run > longest:
            longest, where = run, index - run + 1
    if longest >= config.max_run:
        return f"{units[where]!r} repeated {longest} times in a row (limit {config.max_run - 1})"
    for period in range(2, config.max_period + 1):
        span = 0
        for index in range(period, len(units)):
            span = span + 1 if units[index] == units[index - period] else 0
            total = span + period
            if total >= max(config.min_span, 3 * period):
                cycle = list(units[index - period + 1 : index + 1])
                return (
                    f"a {period}-unit cycle {cycle!r} repeated over {total} units"
                    f" (limit {config.min_span - 1})"
                )
    return None


def evaluate(
    outputs: Sequence[Decoded], reference: Reference | None, config: GateConfig
) -> GateVerdict:
    """The verdict on ``outputs``: degeneration first, then the match with ``reference``."""
    tokens = all(o.token_ids is not None for o in outputs) and (
        reference is None or all(o.token_ids is not None for o in reference.outputs)
    )
    compared_on = "token ids" if tokens else "text units"
    refs: list[Decoded | None] = list(reference.outputs) if reference is not None else []
    refs += [None] * (len(outputs) - len(refs))
    texts = [o.text for o in outputs]
    loops = []
    for index, (out, ref) in enumerate(zip(outputs, refs, strict=True)):
        why = degeneration(out.units(tokens), config)
        if why is None:
            continue
        if ref is not None and degeneration(ref.units(tokens), config) is not None:
            continue  # the model loops there by itself; the match check judges it
        loops.append(f"prompt {index + 1} ({out.prompt[:30]!r}): {why}; output {out.text[:120]!r}")
    source = reference.source if reference is not None else ""
    if loops:
        return GateVerdict(
            False, "degeneration", "degenerate output: " + "; ".join(loops),
            compared_on=compared_on, reference_source=source, degenerate=loops, outputs=texts,
        )  # fmt: skip
    if reference is None:
        return GateVerdict(
            True, None, f"no reference recorded: degeneration check only ({len(outputs)} prompts)",
            compared_on=compared_on, outputs=texts,
        )  # fmt: skip
    rates = [
        match_rate(ref.units(tokens), out.units(tokens)) if ref is not None else 0.0
        for out, ref in zip(outputs, refs, strict=True)
    ]
    mean = sum(rates) / len(rates) if rates else 0.0
    shown = ", ".join(f"{r:.2f}" for r in rates)
    verdict = GateVerdict(
        mean >= config.threshold, None if mean >= config.threshold else "lossless",
        "", round(mean, 4), [round(r, 4) for r in rates], compared_on, source, outputs=texts,
    )  # fmt: skip
    if verdict.ok:
        verdict.message = (
            f"greedy output matches the reference ({source}): {mean:.3f} >= {config.threshold}"
            f" on {compared_on} (per prompt {shown})"
        )
        return verdict
    worst = min(range(len(rates)), key=rates.__getitem__)
    ref_text = refs[worst].text if refs[worst] is not None else ""  # type: ignore[union-attr]
    verdict.message = (
        f"greedy output differs from the reference ({source}): token match rate {mean:.3f}"
        f" < {config.threshold} on {compared_on} (per prompt {shown}); prompt {worst + 1}"
        f" gave {outputs[worst].text[:80]!r}, the reference {ref_text[:80]!r}"
    )
    return verdict


def load_reference(path: str) -> Reference | None:
    """The stored reference, or None when there is none (a broken file is an error)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{path}: not a readable reference ({exc}); remove it") from None
    try:
        return Reference.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise RuntimeError(f"{path}: not a reference ({exc}); remove it") from None


def save_reference(path: str, reference: Reference) -> None:
    os.makedirs(os.path.dirname(path) or ".", mode=0o750, exist_ok=True)
    if not reference.recorded_at:
        reference.recorded_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_atomic(path, json.dumps(reference.as_dict(), indent=1) + "\n", 0o640)


def _listed_root(
    base_url: str, served_model_name: str, timeout: float, api_key: str | None = None
) -> str | None:
    """The model path ``/v1/models`` reports for the served name (vLLM's ``root``), if any."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with open_url(
            base_url.rstrip("/") + "/v1/models", headers=headers, timeout=timeout
        ) as resp:
            data = json.loads(resp.read().decode("utf-8", errors="replace"))
        for entry in data.get("data", []):
            if entry.get("id") == served_model_name and entry.get("root"):
                return str(entry["root"])
    except (
        urllib.error.URLError,
        OSError,
        TimeoutError,
        ValueError,
        AttributeError,
        UrlConnectionError,
    ):
        return None
    return None


@dataclass
class NodeGate:
    """The gate as the ``service_unit`` step runs it on the serving host.

    ``model`` keys the reference (the model path or hub id the unit serves);
    ``record``: this unit serves without speculation (``method: none``), so its output
    becomes the reference when none fits; ``refresh``: replace a fitting reference too
    (after a deliberate engine change that moves floating point).
    """

    url: str
    served_model_name: str
    model: str
    reference_path: str
    config: GateConfig = field(default_factory=GateConfig)
    record: bool = False
    refresh: bool = False
    api_key: str | None = None
    recorded: str = ""  # what this run recorded, for the result
    seconds: float = 0.0  # time spent decoding (a measurement, like the readiness probe)

    def _fitting(self) -> tuple[Reference | None, str]:
        ref = load_reference(self.reference_path)
        if ref is None:
            return None, "none recorded"
        why = ref.fits(self.model, self.config)
        return (None, f"the stored one does not apply: {why}") if why else (ref, "")

    def _store(self, outputs: list[Decoded], source: str) -> None:
        save_reference(
            self.reference_path,
            Reference(
                self.served_model_name, self.model, prompts_digest(self.config.prompts),
                self.config.max_tokens, source, outputs,
            ),
        )  # fmt: skip
        self.recorded = source

    def needs_reference(self) -> bool:
        """Whether the running server's output should be recorded before it is replaced."""
        return not self.record and self._fitting()[0] is None

    def before_change(self) -> None:
        """Record the running server's output as the reference when none fits (best effort).

        Only when the server lists the served name and, where it reports one, the same
        model path: the output of another model is no reference.
        """
        if not self.needs_reference():
            return
        began = time.monotonic()
        try:
            self._record_before()
        finally:
            self.seconds += time.monotonic() - began

    def _record_before(self) -> None:
        root = _listed_root(
            self.url, self.served_model_name, self.config.request_timeout, self.api_key
        )
        if root is not None and root != self.model:
            return
        try:
            outputs = decode(self.url, self.served_model_name, self.config, api_key=self.api_key)
        except RuntimeError:
            return
        if any(degeneration(o.units(True), self.config) for o in outputs):
            return  # a looping server is no reference
        self._store(outputs, "the server that ran before the change")

    def after_ready(self) -> GateVerdict:
        """Decode the new server and judge it; record the reference when this unit may."""
        reference, why_none = self._fitting()
        began = time.monotonic()
        try:
            outputs = decode(self.url, self.served_model_name, self.config, api_key=self.api_key)
        except RuntimeError as exc:
            return GateVerdict(False, "decode", f"the gate prompts could not be decoded: {exc}")
        finally:
            self.seconds += time.monotonic() - began
        compare_with = None if (self.record and self.refresh) else reference
        verdict = evaluate(outputs, compare_with, self.config)
        if verdict.ok and self.record and (reference is None or self.refresh):
            self._store(outputs, "method none (no speculation)")
            verdict.message += f"; recorded as the reference ({why_none or 'refresh'})"
            compare_with = Reference(
                self.served_model_name, self.model, prompts_digest(self.config.prompts),
                self.config.max_tokens, "this server, one request at a time", outputs,
            )  # fmt: skip
        elif reference is None and verdict.ok:
            verdict.message += f" (reference: {why_none})"
        if verdict.ok and self.config.load > 0:
            return self._under_load(verdict, compare_with)
        return verdict

    def _under_load(self, verdict: GateVerdict, reference: Reference | None) -> GateVerdict:
        """The same prompts inside a loaded batch, against the same reference."""
        began = time.monotonic()
        try:
            loaded = decode_under_load(
                self.url, self.served_model_name, self.config, load=self.config.load,
                api_key=self.api_key,
            )  # fmt: skip
        except RuntimeError as exc:
            return GateVerdict(
                False, "decode", f"the gate prompts could not be decoded under load: {exc}"
            )
        finally:
            self.seconds += time.monotonic() - began
        under = evaluate(loaded.outputs, reference, self.config)
        verdict.under_load = {
            "ok": under.ok, "check": under.check, "match_rate": under.match_rate,
            "per_prompt": under.per_prompt, "load": loaded.load, "started": loaded.started,
            "in_flight": loaded.in_flight, "message": under.message,
            "token_ids": [o.token_ids for o in loaded.outputs],
        }  # fmt: skip
        if under.ok:
            verdict.message += (
                f"; inside a batch of {loaded.started} other requests (still"
                f" {loaded.in_flight} in flight at the end): {under.message}"
            )
            return verdict
        under.check = f"{under.check}-under-load"
        under.message = (
            f"inside a batch of {loaded.started} other requests: {under.message}"
            f" (one request at a time it passed: {verdict.message})"
        )
        under.under_load = verdict.under_load
        return under

    def record_running(self) -> str:
        """For an unchanged, running ``method: none`` server: record a missing reference."""
        if not self.record or self._fitting()[0] is not None:
            return ""
        outputs = decode(self.url, self.served_model_name, self.config, api_key=self.api_key)
        verdict = evaluate(outputs, None, self.config)
        if not verdict.ok:
            raise RuntimeError(f"output gate ({verdict.check}): {verdict.message}")
        self._store(outputs, "method none (no speculation)")
        return self.recorded
