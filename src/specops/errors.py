"""Errors that name what is wrong and what would be valid.

The error classes live in the collection (``module_utils/errors.py``: its filters raise
them); this module re-exports them for the controller package. Besides them, the checks
every command makes of the paths it is given (a file to read, a directory to write into)
and the one-line description of a YAML or JSON syntax error: each raises
:class:`ValidationError` naming the argument, before anything is created, so ``specops``
turns it into one line and exit 2 (:mod:`specops.cli`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.specops.infra.plugins.module_utils.errors import (
    SpecopsError,
    ValidationError,
)

__all__ = [
    "SpecopsError",
    "ValidationError",
    "bool_field",
    "input_dir",
    "input_file",
    "load_yaml_file",
    "one_line",
    "output_dir",
    "output_file",
    "syntax_problem",
]


def bool_field(data: Mapping[str, Any], key: str, default: bool) -> bool:
    """``data[key]`` (``default`` when absent), which must be true or false."""
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ValidationError(key, f"must be true or false (got {value!r})")
    return value


def one_line(text: str) -> str:
    """``text`` on one line: its non-blank lines, stripped, joined by ``; ``."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def syntax_problem(exc: Exception) -> str:
    """Where and what a YAML or JSON syntax error is, on one line
    (``line 3, column 7: mapping values are not allowed here``)."""
    mark = getattr(exc, "problem_mark", None)  # yaml.MarkedYAMLError
    if mark is not None:
        problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
        return f"line {mark.line + 1}, column {mark.column + 1}: {one_line(str(problem))}"
    lineno = getattr(exc, "lineno", None)  # json.JSONDecodeError (orjson's too)
    if lineno is not None:
        msg = getattr(exc, "msg", str(exc))
        return f"line {lineno}, column {getattr(exc, 'colno', '?')}: {one_line(str(msg))}"
    return one_line(str(exc))


def load_yaml_file(path: Path, field: str) -> Any:
    """The YAML document in ``path``; an unreadable, non-UTF-8 or invalid file is a
    ValidationError naming ``field`` (and where the syntax error is)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValidationError(field, f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValidationError(field, f"{path} is not UTF-8 text") from None
    except yaml.YAMLError as exc:
        raise ValidationError(field, f"{path} is not valid YAML: {syntax_problem(exc)}") from None


def input_file(path: str | os.PathLike[str], field: str) -> Path:
    """``path`` as a readable regular file, else ValidationError naming ``field``."""
    file = Path(path)
    if not file.exists():
        raise ValidationError(field, f"no such file: {file}")
    if file.is_dir():
        raise ValidationError(field, f"{file} is a directory; give a file")
    if not os.access(file, os.R_OK):
        raise ValidationError(field, f"{file} is not readable (check its mode and owner)")
    return file


def input_dir(path: str | os.PathLike[str], field: str) -> Path:
    """``path`` as an existing directory, else ValidationError naming ``field``."""
    directory = Path(path)
    if not directory.exists():
        raise ValidationError(field, f"no such directory: {directory}")
    if not directory.is_dir():
        raise ValidationError(field, f"{directory} is a file; give a directory")
    return directory


def _creatable(path: Path, field: str, what: str) -> None:
    """The nearest existing ancestor of ``path`` is a writable directory."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ValidationError(field, f"{parent} is a file, so {path} cannot be {what}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValidationError(field, f"{parent} is not writable, so {path} cannot be {what}")


def output_dir(path: str | os.PathLike[str], field: str) -> Path:
    """``path`` as a directory to write into: an existing directory, or a path that can
    be made one. Nothing is created here."""
    directory = Path(path)
    if directory.exists():
        if not directory.is_dir():
            raise ValidationError(
                field, f"{directory} is a file; give a directory (made when missing)"
            )
        if not os.access(directory, os.W_OK | os.X_OK):
            raise ValidationError(field, f"{directory} is not writable")
        return directory
    _creatable(directory, field, "made a directory")
    return directory


def output_file(path: str | os.PathLike[str], field: str) -> Path:
    """``path`` as a file to write: not a directory, its directory existing or makeable.
    Nothing is created here."""
    file = Path(path)
    if file.is_dir():
        raise ValidationError(field, f"{file} is a directory; give a file path")
    _creatable(file, field, "written")
    return file
