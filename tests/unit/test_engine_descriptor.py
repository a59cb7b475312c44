"""One table of per-engine facts (``module_utils/engine/descriptor.py``) and no second one.

Every consumer supports exactly the descriptor's engines (the roles' argument specs, the
build plan, the flag lists, the translator); the role variables hold no mapping keyed by
engine and no condition on an engine's name; no Python module of the collection or the
controller package keeps a dict keyed by engine names or spells a per-engine fact (an
endpoint, a metric, a launch module, an upstream repository) outside the descriptor.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.specops.infra.plugins.module_utils.engine import build as engine_build
from ansible_collections.specops.infra.plugins.module_utils.engine import flags as engine_flags
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import (
    ENGINES,
    EngineDescriptor,
    descriptor,
    shared,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import (
    CAPABILITIES,
    ENGINE_NAMES,
    known_versions,
)

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collections/ansible_collections/specops/infra/plugins"
DESCRIPTOR = COLLECTION / "module_utils/engine/descriptor.py"
NAMES = frozenset(ENGINES)


def _choices(role: str, option: str) -> list[str]:
    spec = yaml.safe_load((REPO / f"roles/{role}/meta/argument_specs.yml").read_text())
    return list(spec["argument_specs"]["main"]["options"][option]["choices"])


def test_every_consumer_supports_exactly_the_descriptors_engines() -> None:
    assert list(ENGINE_NAMES) == list(ENGINES)
    assert set(CAPABILITIES) == NAMES
    assert set(engine_build.PACKAGES) == NAMES
    assert set(_choices("inference_engine", "inference_engine_engine")) == NAMES
    assert set(engine_flags.LAUNCH_MODULES) == {d.flag_family for d in ENGINES.values()}


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_each_engine_is_complete(name: str) -> None:
    d = ENGINES[name]
    assert d.name == name
    assert d.default_version in known_versions(name), "the default pin needs a flag list"
    assert d.launch == ("-m", d.launch_module, d.model_flag)
    assert d.launch_module
    assert d.model_flag.startswith("--")
    assert d.running_gauge
    assert d.health_path.startswith("/")
    assert d.metrics_path.startswith("/")
    assert d.api_key.env_var
    filled = d.as_dict(venv="/opt/v/", cache_dir="/var/cache/x")
    assert not any("{" in v for v in filled["environment"].values()), filled["environment"]


def test_an_unknown_engine_is_named_with_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"^inference_service_engine: must be one of sglang,"):
        descriptor("tgi", "inference_service_engine")


def test_shared_refuses_once_engines_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    assert shared("health_path") == "/health"
    with pytest.raises(ValueError, match="engines differ in identity_path"):
        shared("identity_path")


# --- no second table ------------------------------------------------------------------


def _walk(node: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, f"{path}[{index}]")


# Operator data keyed by model then engine (a pin per engine), not a per-engine fact.
OPERATOR_DATA = ("inference_engine_model_pins",)
ENGINE_CONDITION = re.compile(
    r"""(==|!=|\bin)\s*\[?\s*['"]({})['"]""".format("|".join(map(re.escape, sorted(ENGINES))))
)


def _role_files() -> Iterator[Path]:
    for role in sorted((REPO / "roles").iterdir()):
        for sub in ("vars", "defaults", "tasks", "templates"):
            folder = role / sub
            if folder.is_dir():
                yield from sorted(p for p in folder.rglob("*") if p.is_file())


def test_the_roles_hold_no_per_engine_mapping_or_condition() -> None:
    found = []
    for path in _role_files():
        text = path.read_text()
        rel = path.relative_to(REPO)
        found += [f"{rel}: {m.group(0)!r}" for m in ENGINE_CONDITION.finditer(text)]
        if path.suffix in (".yml", ".yaml") and path.parent.name in ("vars", "defaults"):
            data = yaml.safe_load(text) or {}
            for name, value in data.items():
                if name in OPERATOR_DATA:
                    continue
                for where, node in _walk(value, name):
                    if isinstance(node, dict) and len(NAMES & set(node)) >= 2:
                        found.append(f"{rel}: {where} is keyed by engine")
    assert found == [], "read the engine descriptor instead (specops.infra.engine_descriptor)"


def _python_files() -> Iterator[Path]:
    for path in sorted(COLLECTION.rglob("*.py")):
        if path != DESCRIPTOR:
            yield path
    for path in sorted((REPO / "src/specops").rglob("*.py")):
        # The lab's stand-ins and bench.synthetic impersonate a server: they serve the
        # facts (an independent spelling the bench is tested against), they do not read them.
        if "lab" in path.relative_to(REPO / "src/specops").parts[:1]:
            continue
        if path.name == "synthetic.py":
            continue
        yield path


def _engine_specific_strings() -> set[str]:
    """Descriptor values that name one engine's fact (shared ones, /health, are no engine's)."""
    facts: set[str] = set()
    for d in ENGINES.values():
        facts |= {d.identity_path, d.settings_path, d.running_gauge, d.launch_module}
        facts |= {d.api_key.env_var, d.git_repo, *d.environment}
        if d.spec_counters is not None:
            facts |= set(d.as_dict()["spec_counters"].values())
        if d.spec_meta is not None:
            facts |= set(d.spec_meta.all)
        if d.server_metrics is not None:
            m = d.server_metrics
            facts |= {*m.queued, *m.kv_usage, *m.preemptions, *m.kv_tokens, m.cache_info}
    return facts - {"", shared("health_path"), shared("metrics_path"), "PATH"}


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            doc = body[0].value
            if isinstance(doc, ast.Constant) and isinstance(doc.value, str):
                lines.update(range(doc.lineno, (doc.end_lineno or doc.lineno) + 1))
    return lines


def scan(paths: Iterator[Path] | list[Path]) -> list[str]:
    """Per-engine tables and facts in ``paths``: a dict keyed by two or more engine names,
    or a string that is one engine's fact (docstrings may name the facts)."""
    facts = _engine_specific_strings()
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstring_lines(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                if len(NAMES & keys) >= 2:
                    found.append(f"{path}:{node.lineno}: a dict keyed by engine")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in facts
                and node.lineno not in docs
            ):
                found.append(f"{path}:{node.lineno}: {node.value!r}")
    return found


def test_no_python_module_keeps_a_per_engine_table() -> None:
    assert scan(_python_files()) == [], "read module_utils/engine/descriptor.py ENGINES instead"


def test_the_scan_sees_a_planted_table(tmp_path: Path) -> None:
    """The scan is not blind: a module with a table of its own is reported."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        '"""Names vllm:num_requests_running in its docstring: allowed."""\n'
        'GAUGES = {"vllm": "x", "sglang": "y"}\n'
        'PATH = "/get_server_info"\n'
    )
    assert scan([planted]) == [
        f"{planted}:2: a dict keyed by engine",
        f"{planted}:3: '/get_server_info'",
    ]


def test_descriptor_type_is_frozen() -> None:
    d: EngineDescriptor = ENGINES["vllm"]
    with pytest.raises(AttributeError):
        d.default_version = "0.0.1"  # type: ignore[misc]
