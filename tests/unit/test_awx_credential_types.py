"""AWX / Automation Platform custom credential types (awx/credential_types/, issue 33):
the shape AWX's API takes (name, kind, inputs.fields, injectors), secrets injected as
files only (``file`` injectors, the extra vars name the file through
``tower.filename.<name>``), never as environment variables or as extra-var values, and
every injected variable a real input of a role (meta/argument_specs.yml)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2.sandbox import SandboxedEnvironment
from plugins.scripts import REPO

TYPES = sorted((REPO / "awx/credential_types").glob("*.yml"))
# AWX: a custom credential type's kind, its fields' types, its injector kinds.
KINDS = {"cloud", "net"}
FIELD_TYPES = {"string", "boolean"}
INJECTORS = {"file", "env", "extra_vars"}
FILE_KEY = re.compile(r"^template(\.[A-Za-z_][A-Za-z0-9_]*)?$")
VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What each type must give, and to which variables (docs/awx.md's table).
EXPECTED = {
    "pve_api_token.yml": {"pve_container_api_token_secret_file", "migrate_api_token_secret_file",
                          "pve_container_api_user", "pve_container_api_token_id",
                          "migrate_api_user", "migrate_api_token_id"},
    "inference_api_key.yml": {"inference_service_api_key_file"},
    "hf_token.yml": {"inference_engine_hf_token_file"},
}  # fmt: skip


def _role_inputs() -> set[str]:
    names: set[str] = set()
    for spec in REPO.glob("roles/*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(spec.read_text())["argument_specs"] or {}).values():
            names |= set((entry or {}).get("options") or {})
    return names


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), path
    return data


def test_the_three_types_are_there() -> None:
    assert sorted(p.name for p in TYPES) == sorted(EXPECTED)


@pytest.mark.parametrize("path", TYPES, ids=lambda p: p.name)
def test_the_shape_is_awx_s(path: Path) -> None:
    data = _load(path)
    assert set(data) == {"name", "description", "kind", "inputs", "injectors"}
    assert data["kind"] in KINDS
    assert isinstance(data["name"], str)
    assert data["name"].startswith("specops ")
    fields = data["inputs"]["fields"]
    ids = [f["id"] for f in fields]
    assert len(ids) == len(set(ids))
    for field in fields:
        assert set(field) <= {"id", "label", "type", "secret", "help_text", "multiline"}
        assert VAR.match(field["id"])
        assert field["label"]
        assert field["type"] in FIELD_TYPES
    assert set(data["inputs"]["required"]) <= set(ids)
    assert set(data["injectors"]) <= INJECTORS


@pytest.mark.parametrize("path", TYPES, ids=lambda p: p.name)
def test_secrets_are_injected_as_files_only(path: Path) -> None:
    data = _load(path)
    secret = {f["id"] for f in data["inputs"]["fields"] if f.get("secret")}
    assert secret, "every type here carries a secret"
    injectors = data["injectors"]
    assert "env" not in injectors  # an environment reaches command lines and /proc
    files = injectors["file"]
    assert all(FILE_KEY.match(k) for k in files)
    named = {k.split(".", 1)[1] for k in files if "." in k}
    for key, template in files.items():
        assert re.fullmatch(r"\{\{ *(\w+) *\}\}", template), (key, template)
    # Each secret goes into a file; no extra var carries a secret's value.
    assert {re.search(r"\w+", t)[0] for t in files.values()} == secret  # type: ignore[index]
    for var, template in injectors["extra_vars"].items():
        assert VAR.match(var)
        used = set(re.findall(r"\{\{\s*([\w.]+)\s*\}\}", template))
        assert not used & secret, f"{var} carries a secret's value"
        for ref in used:
            if ref.startswith("tower.filename"):
                assert ref.removeprefix("tower.filename.") in named, ref


@pytest.mark.parametrize("path", TYPES, ids=lambda p: p.name)
def test_every_injected_variable_is_a_role_input(path: Path) -> None:
    injected = set(_load(path)["injectors"]["extra_vars"])
    assert injected == EXPECTED[path.name]
    assert injected <= _role_inputs(), injected - _role_inputs()


@pytest.mark.parametrize("path", TYPES, ids=lambda p: p.name)
def test_the_injectors_render_to_file_paths(path: Path) -> None:
    """Rendered as AWX renders them (sandboxed Jinja, ``tower.filename`` the written
    files): the ``*_file`` variables are the paths of the files that hold the secrets."""
    data = _load(path)
    env = SandboxedEnvironment()
    inputs = {f["id"]: f"value-of-{f['id']}" for f in data["inputs"]["fields"]}
    files = data["injectors"]["file"]
    paths = {k.split(".", 1)[1]: f"/runner/env/tmp{i}" for i, k in enumerate(sorted(files))}
    written = {paths[k.split(".", 1)[1]]: env.from_string(t).render(**inputs)
               for k, t in files.items()}  # fmt: skip
    context = {**inputs, "tower": {"filename": paths}}
    rendered = {k: env.from_string(v).render(**context)
                for k, v in data["injectors"]["extra_vars"].items()}  # fmt: skip
    for var, value in rendered.items():
        if var.endswith("_file"):
            assert value in written
            assert written[value].startswith("value-of-")
        else:
            assert not value.startswith("/runner")
