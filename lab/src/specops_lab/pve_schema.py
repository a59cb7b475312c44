"""The Proxmox VE 9.1 API schema: look up endpoints and check calls against it.

One home for "does PVE accept this call?": the lab API stand-in rejects what this module
rejects, and tests check every Proxmox API call the project makes (path template, method,
parameter names and values). It follows PVE's own code at the upstream commits in
:data:`UPSTREAM` (public mirrors of Proxmox's git):

- :func:`find_endpoint` = ``PVE::RESTHandler::map_path_to_methods`` (literal path
  segments before ``{param}`` ones) and ``PVE::HTTPServer::rest_handler``'s 501;
- :func:`check_call` = ``PVE::HTTPServer::rest_handler`` (URI parameters merged, a
  conflicting duplicate refused) + ``PVE::RESTHandler::handle``
  (``$normalize_legacy_param_formats``, then ``PVE::JSONSchema::validate``, which is
  :mod:`specops_lab.pve_jsonschema`; the named formats are :mod:`specops_lab.pve_formats`).

The schema is ``specops_lab/data/pve-9.1-api-schema.json`` (flattened from the API viewer
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

from specops_lab.pve_formats import perl_str
from specops_lab.pve_jsonschema import (
    ADDITIONAL,
    check_object,
    check_type,
    prop_schema,
    typed_value,
)

__all__ = [
    "SCHEMA_FILE",
    "UPSTREAM",
    "ApiError",
    "CallPrivileges",
    "Endpoint",
    "calls_in",
    "check_call",
    "check_returns",
    "find_endpoint",
    "load_schema",
    "privileges_of",
    "pveum_commands",
    "typed_returns",
]

SCHEMA_FILE = Path(__file__).resolve().parent / "data" / "pve-9.1-api-schema.json"

# The upstream sources every "follows PVE's ..." in this module and in the lab stand-in
# (specops_lab.pve) was read from: git.proxmox.com mirrors on GitHub, at these commits.
UPSTREAM: dict[str, str] = {
    "pve-common": "f665029eac78022e81810ab2e44eace57ade13fb",
    "pve-container": "94f558522ef61f9858c39c264d0ac4e697e49268",
    "pve-guest-common": "4a8f6cbf78e1b6992ef77facb4ff2ab3372999e7",
    "pve-manager": "14a22df35955d97dfc1af21e117dc894a29df0c9",
    "pve-http-server": "5c9e4ea773364bdb7ae0e2faec5750fe58129a47",
    "pve-storage": "0c56bad8b2a7d69e5ce2c243651fe830d6caa936",
    "pve-access-control": "5ccd07d9302562b73374d331b63d25b04b86766c",
    "qemu-server": "e6352be67f70042a7433a3a3c712b36d02f9f7cb",
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

    Literal segments win over ``{param}`` ones, as in ``PVE::RESTHandler::
    map_path_to_methods``. Unknown: HTTP 501 ``Method 'GET /x' not implemented``
    (``PVE::HTTPServer::rest_handler``'s default answer).
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


def check_call(
    method: str,
    path: str,
    params: Mapping[str, Any] | None = None,
    schema_file: Path = SCHEMA_FILE,
) -> tuple[Endpoint, dict[str, Any]]:
    """Validate a call; returns the endpoint and the typed parameters (path ones included).

    Raises :class:`ApiError` 501 for an unknown path/method and 400 "Parameter
    verification failed." with per-parameter ``errors`` otherwise, as PVE answers
    (``PVE::HTTPServer::rest_handler`` + ``PVE::RESTHandler::handle``).
    """
    endpoint = find_endpoint(method, path, schema_file)
    given: dict[str, Any] = {}
    for key, value in endpoint.path_params.items():
        given[key] = value
    for key in sorted(params or {}):
        value = (params or {})[key]
        if key in given and perl_str(given[key]) != perl_str(value):
            raise ApiError(
                400,
                "Parameter verification failed.",
                {key: "duplicate parameter (already defined in URI) with conflicting values!"},
            )
        given[key] = value
    parameters: Mapping[str, Any] = endpoint.info.get("parameters", {})
    props: Mapping[str, Any] = parameters.get("properties", {})
    # PVE::RESTHandler $normalize_legacy_param_formats
    for key, value in list(given.items()):
        sub = prop_schema(props, key)
        if sub is None or not value:
            continue
        fmt = sub.get("format")
        if (
            isinstance(value, list | tuple)
            and sub.get("type") == "string"
            and isinstance(fmt, str)
            and fmt.endswith("-list")
        ):
            given[key] = ",".join(map(perl_str, value))
        elif not isinstance(value, list | tuple) and sub.get("type") == "array":
            given[key] = [value]
    errors: dict[str, str] = {}
    check_object(None, props, given, parameters.get("additionalProperties"), errors)
    if errors:
        raise ApiError(400, "Parameter verification failed.", errors)
    typed = {key: typed_value(prop_schema(props, key), value) for key, value in given.items()}
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
    """Differences between a response's ``data`` and the documented ``returns`` shape
    (types, enums, required keys; array items and nested objects too)."""
    endpoint = find_endpoint(method, path, schema_file)
    returns: Mapping[str, Any] = endpoint.info.get("returns", {})
    problems: list[str] = []

    def check(where: str, schema: Mapping[str, Any], obj: Any) -> None:
        if not _type_ok(schema, obj):
            problems.append(f"{where}: want {schema.get('type')}, got {obj!r}")
            return
        if "enum" in schema and obj is not None and obj not in schema["enum"]:
            problems.append(f"{where}: {obj!r} not in {schema['enum']}")
        if isinstance(obj, dict) and isinstance(schema.get("properties"), Mapping):
            for key, sub in schema["properties"].items():
                if key not in obj:
                    if not sub.get("optional"):
                        problems.append(f"{where}.{key}: missing")
                    continue
                check(f"{where}.{key}", sub, obj[key])
        if isinstance(obj, list) and isinstance(schema.get("items"), Mapping):
            for i, item in enumerate(obj):
                check(f"{where}[{i}]", schema["items"], item)

    check("data", returns, data)
    return problems


def typed_returns(method: str, path: str, data: dict[str, Any]) -> dict[str, Any]:
    """Config values read from a file are strings; give them the documented JSON types
    (``memory: 1024`` is an integer in PVE's answer, ``onboot`` 0/1)."""
    returns: Mapping[str, Any] = find_endpoint(method, path).info.get("returns", {})
    props: Mapping[str, Any] = returns.get("properties", {})
    out: dict[str, Any] = {}
    for key, value in data.items():
        schema = prop_schema(props, key)
        typ = schema.get("type") if schema else None
        if isinstance(value, str) and typ in ("integer", "number", "boolean"):
            errs: dict[str, str] = {}
            out[key] = typed_value(schema, value) if check_type(key, typ, value, errs) else value
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
            if prop_schema(endpoint.properties, name) is None:
                problems.append(f"{method} {path}: parameter '{name}': {ADDITIONAL}")
    return problems


# --------------------------------------------------------------------------- privileges

_PRIV_NAME = re.compile(
    r"\b(?:VM|Sys|Datastore|Pool|SDN|Mapping|Realm|User|Group|Permissions)(?:\.[A-Z][A-Za-z]*)+"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z'])")


@dataclass(frozen=True)
class CallPrivileges:
    """What one call needs: privileges (from the schema's ``permissions``) and the
    sentences that reserve something of it to ``root@pam`` (no API token is that)."""

    method: str
    template: str
    privileges: tuple[str, ...]
    root_only: tuple[str, ...]


def _check_privileges(check: Any) -> set[str]:
    """Privileges a ``permissions.check`` names: ``["perm", path, [privs], ...]`` (with
    ``"any", 1`` one of them is enough, depending on the parameters: all are listed,
    since specops sends the parameters each stands for), ``["and"|"or", ...]``."""
    if not isinstance(check, list) or not check:
        return set()
    head = check[0]
    if head == "perm" and len(check) > 2 and isinstance(check[2], list):
        return {str(p) for p in check[2]}
    if head in ("and", "or"):
        return set().union(*(_check_privileges(c) for c in check[1:]))
    return set()


def _named_params(sentence: str, props: Mapping[str, Any]) -> set[str]:
    names = set()
    for word in re.findall(r"'([^']+)'", sentence):
        base = re.sub(r"\[n\]$", "", word)
        if word in props or f"{base}[n]" in props:
            names.add(base)
    return names


def _sends(params: Sequence[str], name: str) -> bool:
    return any(p == name or re.fullmatch(rf"{re.escape(name)}\d+", p) for p in params)


def privileges_of(
    method: str, template: str, params: Sequence[str], schema_file: Path = SCHEMA_FILE
) -> CallPrivileges:
    """The privileges PVE checks for this call with these parameter names.

    From the endpoint's ``permissions``: its structured ``check``, and each sentence of
    its ``description`` (PVE writes most list and task endpoints' rules there). A
    sentence that names parameters in quotes (``The 'bwlimit' ... parameters require
    'Sys.Modify'``) applies only when one of them is sent; one that says ``root@pam``
    is kept as a root-only note instead of a privilege.
    """
    endpoint = find_endpoint(method, template, schema_file)
    permissions: Mapping[str, Any] = endpoint.info.get("permissions") or {}
    privileges = _check_privileges(permissions.get("check"))
    root_only: list[str] = []
    for sentence in _SENTENCE_END.split(str(permissions.get("description") or "").strip()):
        if not sentence:
            continue
        named = _named_params(sentence, endpoint.properties)
        if named and not any(_sends(params, n) for n in named):
            continue
        if "root@pam" in sentence:
            root_only.append(sentence)
            continue
        privileges |= set(_PRIV_NAME.findall(sentence))
    return CallPrivileges(
        method.upper(), endpoint.template, tuple(sorted(privileges)), tuple(root_only)
    )


def pveum_commands(
    privileges: Sequence[str],
    *,
    role: str = "SpecopsAutomation",
    user: str = "specops@pve",
    token: str = "automation",  # noqa: S107  (the token's name, not a secret)
) -> str:
    """The ``pveum`` lines that make a dedicated user, a role with exactly
    ``privileges``, a privilege-separated API token, and give both the role on ``/``
    (a separated token holds what its own ACL and its user's ACL both grant)."""
    return "\n".join(
        [
            f"pveum role add {role} --privs '{','.join(sorted(set(privileges)))}'",
            f"pveum user add {user} --comment 'specops automation (API token only)'",
            f"pveum acl modify / --roles {role} --users {user}",
            f"pveum user token add {user} {token} --privsep 1",
            f"pveum acl modify / --roles {role} --tokens '{user}!{token}'",
        ]
    )
