"""Every engine version an inventory can end up with has a flag list the translator knows.

The versions come from where the roles take them: ``inference_engine_model_pins``
(per model and engine), the engines' default pins (the descriptor,
``module_utils/engine/descriptor.py``) and the example inventory's versions (set or shown
commented out, e.g. the vLLM 0.20.1 that the operator's DFlash builds start from).
``specops profile render`` must work offline for each, and render the same flags the
data file holds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import ENGINES
from ansible_collections.specops.infra.plugins.module_utils.speculative import engines
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import to_argv

REPO = Path(__file__).resolve().parents[2]


def _pinned() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    defaults = yaml.safe_load((REPO / "roles/inference_engine/defaults/main.yml").read_text())
    for pins in defaults["inference_engine_model_pins"].values():
        for engine, pin in pins.items():
            if isinstance(pin, dict):
                found.update((engine, str(pin[k])) for k in ("pin", "min") if k in pin)
    found.update((name, d.default_version) for name, d in ENGINES.items())
    # The example inventory's versions, set or commented out ("engine: x" then "version"),
    # file by file (group_vars and each host_vars).
    for path in sorted((REPO / "inventory/example").rglob("*.yml")):
        engine = None
        for line in path.read_text().splitlines():
            body = line.lstrip("# ").strip()
            m = re.match(r"inference_engine_engine:\s*(\S+)", body)
            if m:
                engine = m.group(1).strip("\"'")
            m = re.match(r"inference_engine_version:\s*\"?([\d.]+)", body)
            if m and engine:
                found.add((engine, m.group(1)))
    return found


def test_the_pins_include_the_operators_versions() -> None:
    pins = _pinned()
    assert ("sglang", "0.5.11") in pins
    assert ("vllm", "0.20.1") in pins, pins


@pytest.mark.parametrize(("engine", "version"), sorted(_pinned()))
def test_every_pinned_version_renders_offline(engine: str, version: str) -> None:
    assert version in engines.known_versions(engine), (
        f"{engine} {version} is pinned but has no flag list in {engines.FLAG_LISTS}/"
    )
    ngram = SpeculativeProfile.from_mapping({"method": "ngram", "num_draft_tokens": 5})
    build = engines.Engine.parse(engine, version)
    argv = to_argv(ngram, build)
    assert argv, f"{engine} {version}: no flags for an ngram profile"
    assert all(a in build.flags.flags for a in argv if a.startswith("--")), argv
