"""The lossless-output gate from the controller: the rollout's smoke step and the sweep.

The gate itself (prompts, greedy decoding, match rate, loop detector, reference file)
has one home, the collection's stdlib-only
``ansible_collections.specops.infra.plugins.module_utils.output_gate``, which the
``service_unit`` step runs on the node after every restart. Here the controller runs
the same gate against a reference it keeps itself:

- the rollout: ``specops rollout baseline`` records the node's output before the change
  beside the node's bench baseline (``<node>.output-gate.json``); ``specops rollout
  smoke`` judges the new profile's output against it (gate ``output``);
- the sweep: the canary's output before the first candidate is applied
  (``<out>/output-reference.json``, kept across a resumed sweep); every candidate is
  judged after its restart and rejected, without a benchmark, when it fails.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ansible_collections.specops.infra.plugins.module_utils.output_gate import (
    GateConfig,
    GateVerdict,
    Reference,
    decode,
    degeneration,
    evaluate,
    load_reference,
    prompts_digest,
    save_reference,
)

from specops.bench.plan import read_api_key
from specops.errors import ValidationError

__all__ = [
    "GateConfig",
    "OutputCheck",
    "api_key_of",
    "gate_config",
    "record",
    "reference_beside",
    "served_model",
    "verdict",
]


def gate_config(data: object, where: str = "output_gate") -> GateConfig | None:
    """The gate's settings as the inventory spells them; None when the gate is off.

    ``true``/``false``, or a mapping: ``enabled``, ``threshold``, ``max_tokens`` and
    ``degeneration`` (``enabled``, ``max_run``, ``max_period``, ``min_span``), the shape of
    the ``inference_service_output_gate*`` variables.
    """
    if data is None or data is True:
        return GateConfig()
    if data is False:
        return None
    if not isinstance(data, Mapping):
        raise ValidationError(where, f"must be true, false or a mapping (got {data!r})")
    values = dict(data)
    if values.pop("enabled", True) is False:
        return None
    loops = dict(values.pop("degeneration", None) or {})
    if "enabled" in loops:
        loops["detect_loops"] = loops.pop("enabled")
    try:
        config = GateConfig.from_mapping({**values, **loops})
    except (ValueError, TypeError) as exc:
        raise ValidationError(where, str(exc)) from None
    problems = config.problems()
    if problems:
        raise ValidationError(f"{where}.{problems[0].split(':')[0]}", problems[0].split(": ", 1)[1])
    return config


def reference_beside(baseline: Path) -> Path:
    """Where the rollout keeps a node's reference: next to its bench baseline."""
    return baseline.with_name(baseline.stem + ".output-gate.json")


def api_key_of(plan: Mapping[str, object]) -> str | None:
    """The server's API key as a bench plan names it (``api_key_file``, a 0600 file, or
    ``api_key_env``), for the gate's requests; None when the plan names none."""
    key_file = plan.get("api_key_file")
    if key_file:
        return read_api_key(str(key_file))
    env = plan.get("api_key_env")
    if not env:
        return None
    return os.environ.get(str(env)) or None


def served_model(base_url: str, timeout: float = 10.0, api_key: str | None = None) -> str:
    """The first model the server lists in ``/v1/models`` (RuntimeError when none)."""
    url = base_url.rstrip("/") + "/v1/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - the node URL
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - the node URL
            data = json.loads(resp.read().decode("utf-8", errors="replace"))
        return str(data["data"][0]["id"])
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise RuntimeError(f"{url}: no served model listed ({exc})") from None


def record(
    base_url: str, path: Path, config: GateConfig, source: str, served: str | None = None,
    *, api_key: str | None = None,
) -> Reference | None:  # fmt: skip
    """Decode the running server and keep its output as the reference at ``path``.

    Returns None (nothing kept) when its output loops: a looping server is no reference.
    ``api_key``: the server's key (its ``--api-key``), sent as a bearer token.
    """
    name = served or served_model(base_url, api_key=api_key)
    outputs = decode(base_url, name, config, api_key=api_key)
    if any(degeneration(o.units(True), config) for o in outputs):
        return None
    ref = Reference(name, name, prompts_digest(config.prompts), config.max_tokens, source, outputs)
    save_reference(str(path), ref)
    return ref


def verdict(
    base_url: str, path: Path, config: GateConfig, served: str | None = None,
    *, api_key: str | None = None,
) -> GateVerdict:  # fmt: skip
    """Judge the server's greedy output against the reference at ``path`` (if any)."""
    name = served or served_model(base_url, api_key=api_key)
    reference = load_reference(str(path))
    if reference is not None and reference.fits(reference.model, config) is not None:
        reference = None
    try:
        outputs = decode(base_url, name, config, api_key=api_key)
    except RuntimeError as exc:
        return GateVerdict(False, "decode", f"the gate prompts could not be decoded: {exc}")
    return evaluate(outputs, reference, config)


@dataclass
class OutputCheck:
    """The sweep's candidate gate: a reference taken once, then one verdict per candidate."""

    path: Path
    config: GateConfig = field(default_factory=GateConfig)
    served: str | None = None
    api_key: str | None = field(default=None, repr=False)

    def prepare(self, base_url: str) -> str:
        """Record the canary's current output unless a reference is kept; what happened."""
        if self.path.exists():
            return f"output gate: reference kept in {self.path}"
        try:
            ref = record(base_url, self.path, self.config, "the canary before the sweep",
                         self.served, api_key=self.api_key)  # fmt: skip
        except RuntimeError as exc:
            return f"output gate: no reference ({exc}); degeneration check only"
        if ref is None:
            return "output gate: the canary's output loops; no reference, degeneration check only"
        return f"output gate: reference recorded in {self.path}"

    def reject(self, base_url: str) -> str | None:
        """None when the running candidate passes, else the reason it is rejected."""
        result = verdict(base_url, self.path, self.config, self.served, api_key=self.api_key)
        return None if result.ok else f"output gate ({result.check}): {result.message}"
