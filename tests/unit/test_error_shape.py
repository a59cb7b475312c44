"""Bad input has one shape (issue 52): ``errors.ValidationError`` (field, problem, valid
values). The module_utils families that raise it under their own names are that class,
so the controller's one-line-and-exit-2 path (``specops.errors``) and any caller that
catches ``ValidationError`` or ``ValueError`` read every one of them the same way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError
from ansible_collections.specops.infra.plugins.module_utils.gpu_select import GpuSelectError
from ansible_collections.specops.infra.plugins.module_utils.lxc_gpu import (
    LxcGpuError,
    ipc_wanted,
)
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import PveConfError
from ansible_collections.specops.infra.plugins.module_utils.pve.container import SpecError

MODULE_UTILS = (
    Path(__file__).resolve().parents[2]
    / "collections/ansible_collections/specops/infra/plugins/module_utils"
)
FAMILY_ERRORS = (GpuSelectError, LxcGpuError, PveConfError, SpecError)


def test_the_message_names_the_field_the_problem_and_what_is_valid() -> None:
    err = ValidationError("speculative.method", "'eagle9' is not a method", ["ngram", "mtp"])
    assert str(err) == "speculative.method: 'eagle9' is not a method (valid: ngram, mtp)"
    assert (err.field, err.problem, err.valid) == (
        "speculative.method",
        "'eagle9' is not a method",
        ("ngram", "mtp"),
    )
    assert (
        str(ValidationError("port", "must be 1-65535 (got 0)")) == "port: must be 1-65535 (got 0)"
    )


@pytest.mark.parametrize("cls", FAMILY_ERRORS, ids=lambda c: c.__name__)
def test_each_family_error_is_the_one_shape(cls: type[ValidationError]) -> None:
    err = cls("gpu_count", "must be >= 1 (got 0)")
    assert isinstance(err, ValidationError)
    assert isinstance(err, ValueError)  # what their callers caught before
    assert (err.field, err.problem, str(err)) == (
        "gpu_count",
        "must be >= 1 (got 0)",
        "gpu_count: must be >= 1 (got 0)",
    )


def test_a_raised_family_error_carries_its_valid_values() -> None:
    with pytest.raises(ValidationError) as caught:
        ipc_wanted("sometimes", 2)
    assert caught.value.valid == ("auto", "always", "never")


def test_no_module_util_defines_the_field_problem_shape_again() -> None:
    """A class of module_utils whose __init__ takes (x, problem) and is not a
    ValidationError would be a second home of the shape."""
    again = []
    for path in sorted(MODULE_UTILS.glob("*.py")):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = [a.arg for a in item.args.args]
                    if "problem" in args and "ValidationError" not in bases:
                        again.append(f"{path.name}:{node.lineno} {node.name}")
    assert not again, again
