"""The Proxmox VE 9.1 API schema: look up endpoints and check calls against it.

One home for "does PVE accept this call?": the lab API stand-in rejects what this module
rejects, and a test can check every Proxmox API call the project makes (path template,
method, parameter names and values). Checks follow ``PVE::JSONSchema`` (parameter
names, required, type, enum, minimum/maximum, maxLength, pattern, property-string keys
and a few named formats) and use its error wording, so the stand-in answers as PVE does.

The schema is ``specops/data/pve-9.1-api-schema.json`` (flattened from the API viewer
data of pve-docs 9.1.3: ``{path: {METHOD: {parameters, returns, ...}}}``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "SCHEMA_FILE",
    "ApiError",
    "Endpoint",
    "calls_in",
    "check_call",
    "check_returns",
    "find_endpoint",
    "load_schema",
    "typed_returns",
]

SCHEMA_FILE = Path(__file__).resolve().parent / "data" / "pve-9.1-api-schema.json"

ADDITIONAL = "property is not defined in schema and the schema does not allow additional properties"
MISSING = "property is missing and it is not optional"

# How many instances PVE allows of each "name[n]" option (netN 0-31, mpN 0-255, ...).
_INSTANCES = {
    "hostpci": 16,
    "net": 32,
    "mp": 256,
    "dev": 256,
    "unused": 256,
    "usb": 14,
    "serial": 4,
    "parallel": 3,
    "ide": 4,
    "sata": 6,
    "scsi": 31,
    "virtio": 16,
    "numa": 8,
    "ipconfig": 32,
    "virtiofs": 10,
}


class ApiError(Exception):
    """A refused call: HTTP ``status``, PVE's ``message`` and per-parameter ``errors``."""

    def __init__(self, status: int, message: str, errors: dict[str, str] | None = None) -> None:
        self.status = status
        self.message = message
        self.errors = errors
        detail = "" if not errors else " " + "; ".join(f"{k}: {v}" for k, v in errors.items())
        super().__init__(f"{status} {message}{detail}")


@dataclass(frozen=True)
class Endpoint:
    template: str
    method: str
    info: Mapping[str, Any]
    path_params: Mapping[str, str]

    @property
    def properties(self) -> Mapping[str, Any]:
        props: Mapping[str, Any] = self.info.get("parameters", {}).get("properties", {})
        return props


@functools.lru_cache(maxsize=4)
def load_schema(path: Path = SCHEMA_FILE) -> dict[str, dict[str, Any]]:
    data: dict[str, dict[str, Any]] = json.loads(path.read_text())
    return data


@functools.lru_cache(maxsize=4)
def _templates(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    return [(t, tuple(t.strip("/").split("/"))) for t in load_schema(path)]


def find_endpoint(method: str, path: str, schema_file: Path = SCHEMA_FILE) -> Endpoint:
    """The schema entry for ``METHOD /path`` (a concrete path or a ``{param}`` template).

    Literal segments win over ``{param}`` ones, as in PVE's router. Unknown: HTTP 501
    ``Method 'GET /x' not implemented`` (PVE's answer).
    """
    method = method.upper()
    segments = tuple(path.strip("/").split("/")) if path.strip("/") else ("",)
    best: tuple[tuple[bool, ...], str, dict[str, str]] | None = None
    for template, tsegs in _templates(schema_file):
        if len(tsegs) != len(segments) or method not in load_schema(schema_file)[template]:
            continue
        params: dict[str, str] = {}
        score: list[bool] = []
        for tseg, seg in zip(tsegs, segments, strict=True):
            if tseg.startswith("{") and tseg.endswith("}"):
                if not seg:
                    break
                params[tseg[1:-1]] = seg
                score.append(False)
            elif tseg == seg:
                score.append(True)
            else:
                break
        else:
            key = tuple(score)
            if best is None or key > best[0]:
                best = (key, template, params)
    if best is None:
        raise ApiError(501, f"Method '{method} {path}' not implemented")
    _, template, params = best
    return Endpoint(template, method, load_schema(schema_file)[template][method], params)


def _prop_schema(props: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    if name in props:
        schema: Mapping[str, Any] = props[name]
        return schema
    m = re.fullmatch(r"([a-z][a-z\-_]*?)(\d+)", name)
    if m and f"{m.group(1)}[n]" in props and int(m.group(2)) < _INSTANCES.get(m.group(1), 256):
        found: Mapping[str, Any] = props[f"{m.group(1)}[n]"]
        return found
    return None


def _check_named_format(fmt: str, value: str) -> str | None:
    if fmt == "pve-node" and not re.fullmatch(r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?", value):
        return "value does not look like a valid node name"
    if fmt == "pve-storage-id" and not re.fullmatch(
        r"[a-z][a-z0-9\-_.]*[a-z0-9]", value, re.IGNORECASE
    ):
        return f"storage ID '{value}' contains illegal characters"
    if fmt == "pve-configid" and not re.fullmatch(r"[a-z][a-z0-9_\-]*", value, re.IGNORECASE):
        return f"invalid configuration ID '{value}'"
    if fmt == "pve-configid-list":
        for item in re.split(r"[,;\s]+", value.strip()):
            if item and not re.fullmatch(r"[a-z][a-z0-9_\-.]*", item, re.IGNORECASE):
                return f"invalid configuration ID '{item}'"
    if fmt == "pve-vmid-list":
        for item in re.split(r"[,;\s]+", value.strip()):
            if item and not item.isdigit():
                return f"value '{item}' does not look like a valid VM ID"
    return None


def _check_value(  # noqa: PLR0911, PLR0912  (PVE::JSONSchema's checks)
    name: str, schema: Mapping[str, Any], value: Any
) -> tuple[Any, str | None]:
    """Coerce a form/query value to the schema's type; (value, error or None)."""
    typ = schema.get("type", "string")
    if typ == "array":
        return (list(value) if isinstance(value, list | tuple) else [value]), None
    if isinstance(value, list | tuple):
        if len(value) != 1:
            return value, "duplicate parameter (not an array)"
        value = value[0]
    text = str(value)
    if typ == "boolean":
        if isinstance(value, bool):
            return int(value), None
        if re.fullmatch(r"1|true|yes|on", text, re.IGNORECASE):
            return 1, None
        if re.fullmatch(r"0|false|no|off", text, re.IGNORECASE):
            return 0, None
        return value, f"type check ('boolean') failed - got '{text}'"
    if typ == "integer":
        if not re.fullmatch(r"[+-]?\d+", text):
            return value, f"type check ('integer') failed - got '{text}'"
        number: float = int(text)
    elif typ == "number":
        if not re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", text):
            return value, f"type check ('number') failed - got '{text}'"
        number = float(text)
    if typ in ("integer", "number"):
        if "minimum" in schema and number < schema["minimum"]:
            return value, f"value must have a minimum value of {schema['minimum']}"
        if "maximum" in schema and number > schema["maximum"]:
            return value, f"value must have a maximum value of {schema['maximum']}"
        return (int(number) if typ == "integer" else number), None
    if "enum" in schema and text not in schema["enum"]:
        return value, (
            f"value '{text}' does not have a value in the enumeration '{', '.join(schema['enum'])}'"
        )
    if "maxLength" in schema and len(text) > schema["maxLength"]:
        return value, f"value may only be {schema['maxLength']} characters long"
    if "minLength" in schema and len(text) < schema["minLength"]:
        return value, f"value must be at least {schema['minLength']} characters long"
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        py = pattern[4:-1] if pattern.startswith("(?^:") and pattern.endswith(")") else pattern
        try:
            if not re.fullmatch(py, text):
                return value, "value does not match the regex pattern"
        except re.error:
            pass
    fmt = schema.get("format")
    if isinstance(fmt, str):
        err = _check_named_format(fmt, text)
        if err:
            return value, f"invalid format - {err}"
    elif isinstance(fmt, Mapping):
        err = _check_property_string(name, fmt, text)
        if err:
            return value, f"invalid format - format error\n{err}"
    return text, None


def _check_property_string(name: str, fmt: Mapping[str, Any], text: str) -> str | None:
    default_key = next((k for k, v in fmt.items() if v.get("default_key")), None)
    seen: set[str] = set()
    for part in text.split(","):
        if not part:
            continue
        if "=" in part:
            key, val = part.split("=", 1)
        elif default_key and default_key not in seen:
            key, val = default_key, part
        else:
            return f"{name}: value without key, but schema does not define a default key"
        sub = fmt.get(key)
        if sub is None:
            alias = next((k for k, v in fmt.items() if v.get("alias") == key), None)
            sub = fmt.get(alias) if alias else None
        if sub is None:
            return f"{name}.{key}: {ADDITIONAL}"
        if key in seen:
            return f"{name}.{key}: duplicate key in comma-separated list property"
        seen.add(key)
        if sub.get("type") in ("boolean", "integer", "number") or "enum" in sub:
            _, err = _check_value(f"{name}.{key}", sub, val)
            if err:
                return f"{name}.{key}: {err}"
    for key, sub in fmt.items():
        if not sub.get("optional") and key not in seen and not sub.get("alias"):
            return f"{name}.{key}: {MISSING}"
    return None


def check_call(
    method: str,
    path: str,
    params: Mapping[str, Any] | None = None,
    schema_file: Path = SCHEMA_FILE,
) -> tuple[Endpoint, dict[str, Any]]:
    """Validate a call; returns the endpoint and the typed parameters (path ones included).

    Raises :class:`ApiError` 501 for an unknown path/method and 400 "Parameter
    verification failed." with per-parameter ``errors`` otherwise, like PVE.
    """
    endpoint = find_endpoint(method, path, schema_file)
    props = endpoint.properties
    given: dict[str, Any] = dict(params or {})
    errors: dict[str, str] = {}
    for key, value in endpoint.path_params.items():
        if key in given and str(given[key]) != value:
            errors[key] = "path parameter given twice with different values"
        given[key] = value
    typed: dict[str, Any] = {}
    for key, value in given.items():
        schema = _prop_schema(props, key)
        if schema is None:
            errors[key] = ADDITIONAL
            continue
        coerced, err = _check_value(key, schema, value)
        if err:
            errors[key] = err
        else:
            typed[key] = coerced
    for key, schema in props.items():
        if "[n]" in key or schema.get("optional") or key in given:
            continue
        errors[key] = MISSING
    if errors:
        raise ApiError(400, "Parameter verification failed.", errors)
    return endpoint, typed


def _type_ok(schema: Mapping[str, Any], value: Any) -> bool:
    typ = schema.get("type")
    if value is None:
        return bool(schema.get("optional")) or typ == "null"
    checks: dict[str, tuple[type, ...]] = {
        "string": (str,),
        "integer": (int,),
        "number": (int, float),
        "boolean": (int, bool),
        "object": (dict,),
        "array": (list,),
    }
    if isinstance(typ, str) and typ in checks:
        return isinstance(value, checks[typ])
    return True


def check_returns(method: str, path: str, data: Any, schema_file: Path = SCHEMA_FILE) -> list[str]:
    """Differences between a response's ``data`` and the documented ``returns`` shape."""
    endpoint = find_endpoint(method, path, schema_file)
    returns: Mapping[str, Any] = endpoint.info.get("returns", {})
    problems: list[str] = []

    def check_object(where: str, schema: Mapping[str, Any], obj: Any) -> None:
        if not isinstance(obj, dict):
            problems.append(f"{where}: want an object, got {type(obj).__name__}")
            return
        for key, sub in schema.get("properties", {}).items():
            if key not in obj:
                if not sub.get("optional"):
                    problems.append(f"{where}.{key}: missing")
                continue
            if not _type_ok(sub, obj[key]):
                problems.append(f"{where}.{key}: want {sub.get('type')}, got {obj[key]!r}")
            elif "enum" in sub and obj[key] not in sub["enum"]:
                problems.append(f"{where}.{key}: {obj[key]!r} not in {sub['enum']}")

    if not _type_ok(returns, data):
        problems.append(f"data: want {returns.get('type')}, got {type(data).__name__}")
    elif returns.get("type") == "object":
        check_object("data", returns, data)
    elif returns.get("type") == "array" and isinstance(returns.get("items"), Mapping):
        items = returns["items"]
        if items.get("type") == "object":
            for i, item in enumerate(data):
                check_object(f"data[{i}]", items, item)
    return problems


def typed_returns(method: str, path: str, data: dict[str, Any]) -> dict[str, Any]:
    """Config values read from a file are strings; give them the documented JSON types
    (``memory: 1024`` is an integer in PVE's answer, ``onboot`` 0/1)."""
    returns: Mapping[str, Any] = find_endpoint(method, path).info.get("returns", {})
    props: Mapping[str, Any] = returns.get("properties", {})
    out: dict[str, Any] = {}
    for key, value in data.items():
        schema = _prop_schema(props, key)
        typ = schema.get("type") if schema else None
        if isinstance(value, str) and typ in ("integer", "number", "boolean"):
            coerced, err = _check_value(key, schema or {}, value)
            out[key] = value if err else coerced
        else:
            out[key] = value
    return out


def calls_in(paths: Sequence[tuple[str, str, Sequence[str]]]) -> list[str]:
    """Check ``(METHOD, path template, parameter names)`` triples; returns the problems."""
    problems: list[str] = []
    for method, path, names in paths:
        try:
            endpoint = find_endpoint(method, path)
        except ApiError as exc:
            problems.append(exc.message)
            continue
        for name in names:
            if _prop_schema(endpoint.properties, name) is None:
                problems.append(f"{method} {path}: parameter '{name}': {ADDITIONAL}")
    return problems
