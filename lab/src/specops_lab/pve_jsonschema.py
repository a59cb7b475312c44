"""``PVE::JSONSchema``'s validation in Python: what PVE does with a parameter value.

Function by function from pve-common ``src/PVE/JSONSchema.pm`` (commit in
:data:`specops_lab.pve_schema.UPSTREAM`), same order of checks, same error wording (the
trailing newline of a ``die`` included, as PVE's JSON answer shows it):
``check_prop``, ``check_object``, ``check_type``, ``check_format`` (``-list``/``-opt``
suffixes, hash-based formats parsed as property strings), ``parse_property_string``,
``print_property_string``, ``generate_typetext``. A schema keyword not handled here
(``oneOf``, ``allOf``, tuple ``items``, a ``requires`` schema), a named format not in
:mod:`specops_lab.pve_formats` or a pattern that does not translate to Python raises
:class:`~specops_lab.pve_formats.SchemaUnsupported`, never a silent pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from specops_lab.pve_formats import (
    CODE_FORMATS,
    HASH_FORMATS,
    FormatError,
    SchemaUnsupported,
    is_integer,
    is_number,
    parse_boolean,
    perl_pattern,
    perl_str,
    split_list,
)

__all__ = [
    "ADDITIONAL",
    "MISSING",
    "PropertyStringError",
    "check_format",
    "check_object",
    "check_prop",
    "check_type",
    "format_names",
    "generate_typetext",
    "parse_property_string",
    "print_property_string",
    "prop_schema",
    "typed_value",
]

ADDITIONAL = "property is not defined in schema and the schema does not allow additional properties"
MISSING = "property is missing and it is not optional"

# How many instances PVE allows of each "name[n]" option (the API viewer collapses
# dev0..dev255 into dev[n]): pve-container Config.pm $MAX_* constants, qemu-server's.
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


class PropertyStringError(ValueError):
    """``parse_property_string``'s ``raise "format error\\n", errors => {...}``."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("format error")

    def perl_text(self) -> str:
        """``PVE::Exception::stringify``: the message, then ``key: error`` lines."""
        return "format error\n" + "".join(f"{k}: {v}\n" for k, v in sorted(self.errors.items()))


def prop_schema(props: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    if name in props:
        schema: Mapping[str, Any] = props[name]
        return schema
    m = re.fullmatch(r"([a-z][a-z\-_]*?)(\d+)", name)
    if m and f"{m.group(1)}[n]" in props and int(m.group(2)) < _INSTANCES.get(m.group(1), 256):
        found: Mapping[str, Any] = props[f"{m.group(1)}[n]"]
        return found
    return None


def _add_error(errors: dict[str, str], path: str | None, msg: str) -> None:
    """pve-common JSONSchema.pm ``add_error`` (several errors on one path joined by a
    literal ``\\n``, two characters, as Perl's single-quoted ``'\\n'`` does)."""
    key = path or "_root"
    errors[key] = f"{errors[key]}\\n{msg}" if key in errors else msg


def check_format(fmt: str | Mapping[str, Any], value: str, path: str | None = None) -> Any:
    """pve-common JSONSchema.pm ``check_format``: raises FormatError or PropertyStringError."""
    if isinstance(fmt, Mapping):
        return parse_property_string(fmt, value, path)
    if fmt == "regex":
        return None
    m = re.match(r"^(.*?)(?:-(list|opt))?$", fmt)
    assert m is not None  # the pattern matches every string
    name, kind = m.group(1), m.group(2) or "none"
    if name in HASH_FORMATS:
        if kind != "none":
            raise FormatError(f"'-{kind}' format must have code ref, not hash")
        return parse_property_string(name, value, path)
    if name not in CODE_FORMATS:
        raise SchemaUnsupported(
            f"format '{fmt}' is used by the PVE schema but not implemented in "
            "specops_lab.pve_schema (add its validator from the upstream source)"
        )
    validator = CODE_FORMATS[name][0]
    if kind == "list":
        for item in split_list(value):
            validator(item)
    elif kind == "opt":
        if value not in ("", "0"):
            validator(value)
    else:
        validator(value)
    return value


# --------------------------------------------------------------------------- property strings


def _default_key(fmt: Mapping[str, Any]) -> tuple[str | None, dict[str, str]]:
    """pve-common JSONSchema.pm ``$find_schema_default_key``."""
    default: str | None = None
    key_aliases: dict[str, str] = {}
    for key, phash in fmt.items():
        if phash.get("default_key"):
            if default is not None:
                raise SchemaUnsupported(f"multiple default keys in schema ({default}, {key})")
            default = key
        if phash.get("alias") and phash.get("keyAlias"):
            key_aliases[phash["keyAlias"]] = phash["alias"]
    return default, key_aliases


def _hash_format(fmt: str | Mapping[str, Any]) -> tuple[Mapping[str, Any], Any]:
    if isinstance(fmt, Mapping):
        return fmt, None
    if fmt in HASH_FORMATS:
        schema, validator, _ = HASH_FORMATS[fmt]
        return schema, validator
    if fmt in CODE_FORMATS:
        raise FormatError("parse_property_string only accepts hash based named formats")
    raise SchemaUnsupported(f"hash format '{fmt}' is not implemented in specops_lab.pve_schema")


def parse_property_string(  # noqa: PLR0912, PLR0915  (one pass, as in PVE)
    fmt: str | Mapping[str, Any],
    data: str,
    path: str | None = None,
    additional_properties: bool = False,
) -> dict[str, Any]:
    """pve-common JSONSchema.pm ``parse_property_string``: ``k=v`` parts split on ``,``
    (no quoting: a ``,`` always splits), the bare part goes to the ``default_key``,
    aliases resolved, booleans parsed, then ``check_object`` on the result.

    Raises :class:`FormatError` (the ``die``s of the split) or
    :class:`PropertyStringError` (``format error`` with per-key errors).
    """
    schema, validator = _hash_format(fmt)
    res: dict[str, Any] = {}
    default_key: str | None = None
    for part in data.split(","):
        if re.match(r"^\s*$", part):
            continue
        m = re.match(r"^([^=]+)=(.+)$", part)
        if m:
            key, value = m.group(1), m.group(2)
            if key in res:
                raise FormatError(f"duplicate key in comma-separated list property: {key}")
            sub = schema.get(key)
            if sub is not None and sub.get("alias"):
                key_alias = sub.get("keyAlias")
                if key_alias:
                    if key_alias in res:
                        raise FormatError(f"key alias '{key_alias}' is already defined")
                    res[key_alias] = key
                key = sub["alias"]
                sub = schema.get(key)
                if key in res:
                    raise FormatError(f"key '{key}' is already defined (via alias)")
            if sub is None:
                raise FormatError(f"invalid key in comma-separated list property: {key}")
            parsed: Any = value
            if sub.get("type") == "boolean":
                b = parse_boolean(value)
                parsed = value if b is None else b
            res[key] = parsed
        elif "=" not in part:
            if default_key:
                raise FormatError(f"duplicate key in comma-separated list property: {default_key}")
            for key, sub in schema.items():
                if sub.get("default_key"):
                    default_key = key
                    if not _perl_true(res.get(key)):
                        parsed = part
                        if sub.get("type") == "boolean":
                            b = parse_boolean(part)
                            parsed = part if b is None else b
                        res[key] = parsed
                        break
                    raise FormatError(
                        f"duplicate key in comma-separated list property: {default_key}"
                    )
            if not default_key:
                raise FormatError("value without key, but schema does not define a default key")
        else:
            raise FormatError("missing key in comma-separated list property")
    errors: dict[str, str] = {}
    check_object(path, schema, res, additional_properties, errors)
    if errors:
        raise PropertyStringError(errors)
    if validator is not None:
        out: dict[str, Any] = validator(res)
        return out
    return res


def _perl_true(value: Any) -> bool:
    return value is not None and perl_str(value) not in ("", "0")


def _format_size(size: int) -> str:
    """pve-common JSONSchema.pm ``format_size`` (0 is ``0T``, as there)."""
    for unit in ("", "K", "M", "G"):
        if size % 1024:
            return f"{size}{unit}"
        size //= 1024
    return f"{size}T"


def print_property_string(data: Mapping[str, Any], fmt: str | Mapping[str, Any]) -> str:
    """pve-common JSONSchema.pm ``print_property_string``: the default key bare and first,
    then required keys, then the rest, each group sorted; a ``,`` in a value is refused."""
    schema, _ = _hash_format(fmt)
    default_key, key_aliases = _default_key(schema)
    parts: list[str] = []
    done: set[str] = set()

    def value_str(key: str, value: Any, sub_format: Any) -> str:
        if sub_format == "disk-size":
            return _format_size(int(value))
        text = perl_str(value)
        if "," in text:
            raise FormatError(f"illegal value with commas for {key}")
        return text

    def add(key: str, is_default: bool = False) -> None:
        if key in done:
            return
        done.add(key)
        value = data.get(key)
        if value is None:
            return
        phash = schema.get(key)
        combine = key_aliases.get(key)
        if combine and data.get(combine) is not None:
            parts.append(f"{value_str(key, value, None)}={value_str(combine, data[combine], None)}")
            done.add(combine)
            return
        if phash and phash.get("alias"):
            phash = schema.get(phash["alias"])
        if not phash:
            raise FormatError(f"invalid key '{key}'")
        text = value_str(key, value, phash.get("format"))
        parts.append(text if is_default else f"{key}={text}")

    if default_key is not None:
        add(default_key, True)
    for key in sorted(data):
        sub = schema.get(key)
        if sub and not sub.get("optional"):
            add(key)
    for key in sorted(data):
        add(key)
    return ",".join(parts)


def generate_typetext(fmt: str | Mapping[str, Any], list_enums: bool = False) -> str:
    """pve-common JSONSchema.pm ``generate_typetext`` (what the API viewer shows)."""
    schema, _ = _hash_format(fmt)
    default_key, key_aliases = _default_key(schema)
    out = ""
    sep = False

    def add(text: str, optional: bool) -> None:
        nonlocal out, sep
        if sep:
            text = f",{text}"
            out += " "
        out += f"[{text}]" if optional else text
        sep = True

    done: set[str] = set()

    def key_value(key: str) -> None:
        if key in done:
            return
        done.add(key)
        phash = schema.get(key)
        if not phash or phash.get("alias"):
            return
        if phash.get("format_description"):
            typetext = f"<{phash['format_description']}>"
        elif phash.get("typetext"):
            typetext = str(phash["typetext"])
        elif phash.get("enum"):
            enum = phash["enum"]
            typetext = f"<{'|'.join(enum)}>" if list_enums or len(enum) <= 3 else "<enum>"
        elif phash.get("type") == "boolean":
            typetext = "<1|0>"
        elif phash.get("type") in ("integer", "number"):
            typetext = f"<{phash['type']}>"
        else:
            raise SchemaUnsupported(f"neither format_description nor typetext for '{key}'")
        text = f"[{key}=]{typetext}" if key == default_key else f"{key}={typetext}"
        add(text, bool(phash.get("optional")))

    if default_key is not None:
        key_value(default_key)
    for key in sorted(schema):
        if not schema[key].get("optional"):
            key_value(key)
    for key in sorted(schema):
        key_value(key)
    for alias in sorted(key_aliases):
        add(f"<{alias}>=<{key_aliases[alias]}>", True)
    return out


def format_names(schema: Any) -> set[str]:
    """Every named ``format`` in a (sub-)schema, property-string sub-keys and items included."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            fmt = node.get("format")
            if isinstance(fmt, str):
                found.add(fmt)
            elif isinstance(fmt, Mapping):
                for sub in fmt.values():
                    walk(sub)
            for key in ("items", "properties", "additionalProperties"):
                if key == "properties" and isinstance(node.get(key), Mapping):
                    for sub in node[key].values():
                        walk(sub)
                elif key != "properties":
                    walk(node.get(key))

    walk(schema)
    return found


# --------------------------------------------------------------------------- validation


def check_type(  # noqa: PLR0911, PLR0912  (PVE's branches, in its order)
    path: str, typ: Any, value: Any, errors: dict[str, str]
) -> bool:
    """pve-common JSONSchema.pm ``check_type`` (Python lists/dicts/bools stand for Perl's
    ARRAY/HASH refs and JSON booleans)."""
    if not typ:
        return True
    if isinstance(typ, list):
        for t in typ:
            if check_type(path, t, value, {}):
                return True
        _add_error(errors, path, f"type check ('{'|'.join(typ)}') failed")
        return False
    if typ == "any":
        return True
    if typ == "null":
        _add_error(errors, path, f"type check ('{typ}') failed - value is not null")
        return False
    ref = (
        "ARRAY"
        if isinstance(value, list | tuple)
        else "HASH"
        if isinstance(value, Mapping)
        else "JSON::PP::Boolean"
        if isinstance(value, bool)
        else ""
    )
    if typ == "array":
        if ref != "ARRAY":
            _add_error(errors, path, f"type check ('{typ}') failed")
            return False
        return True
    if typ == "object":
        if ref != "HASH":
            _add_error(errors, path, f"type check ('{typ}') failed")
            return False
        return True
    if ref:
        if typ == "boolean" and ref == "JSON::PP::Boolean":
            return True
        _add_error(errors, path, f"type check ('{typ}') failed - got {ref}")
        return False
    text = perl_str(value)
    if typ == "boolean" and text not in ("0", "1"):
        _add_error(errors, path, f"type check ('{typ}') failed - got '{text}'")
        return False
    if typ == "integer" and not is_integer(text):
        _add_error(errors, path, f"type check ('{typ}') failed - got '{text}'")
        return False
    if typ == "number" and not is_number(text):
        _add_error(errors, path, f"type check ('{typ}') failed - got '{text}'")
        return False
    return True


def _unsupported_keywords(schema: Mapping[str, Any], path: str) -> None:
    for word in ("oneOf", "allOf", "type-property", "instance-types"):
        if word in schema:
            raise SchemaUnsupported(f"{path}: schema keyword '{word}' is not implemented")


def check_prop(  # noqa: PLR0911, PLR0912  (PVE's checks, in its order)
    value: Any, schema: Mapping[str, Any], path: str, errors: dict[str, str]
) -> None:
    """pve-common JSONSchema.pm ``check_prop``: missing, type, items/object, then for a
    scalar format, pattern, maxLength, minLength, maximum/minimum, enum (first error wins)."""
    _unsupported_keywords(schema, path)
    if schema.get("alias"):
        return
    if value is None:
        if schema.get("type") == "null":
            return
        if not schema.get("optional") and not schema.get("group"):
            _add_error(errors, path, MISSING)
        return
    if not check_type(path, schema.get("type"), value, errors):
        return
    if isinstance(value, list | tuple):
        items = schema.get("items")
        if isinstance(items, list):
            raise SchemaUnsupported(f"{path}: tuple 'items' (a list of schemas)")
        if isinstance(items, Mapping):
            for i, element in enumerate(value):
                check_prop(element, items, f"{path}[{i}]", errors)
        return
    if isinstance(value, Mapping):
        if "properties" in schema or "additionalProperties" in schema:
            check_object(
                path,
                schema.get("properties") or {},
                value,
                schema.get("additionalProperties"),
                errors,
            )
        return
    text = perl_str(value)
    fmt = schema.get("format")
    if fmt:
        try:
            check_format(fmt, text, path)
        except PropertyStringError as exc:
            _add_error(errors, path, f"invalid format - {exc.perl_text()}")
            return
        except FormatError as exc:
            _add_error(errors, path, f"invalid format - {exc}\n")
            return
    pattern = schema.get("pattern")
    if pattern and not perl_pattern(str(pattern)).search(text):
        _add_error(errors, path, "value does not match the regex pattern")
        return
    if schema.get("maxLength") is not None and len(text) > int(schema["maxLength"]):
        _add_error(errors, path, f"value may only be {schema['maxLength']} characters long")
        return
    if schema.get("minLength") is not None and len(text) < int(schema["minLength"]):
        _add_error(errors, path, f"value must be at least {schema['minLength']} characters long")
        return
    if is_number(text):
        if schema.get("maximum") is not None and float(text) > float(schema["maximum"]):
            _add_error(errors, path, f"value must have a maximum value of {schema['maximum']}")
            return
        if schema.get("minimum") is not None and float(text) < float(schema["minimum"]):
            _add_error(errors, path, f"value must have a minimum value of {schema['minimum']}")
            return
    enum = schema.get("enum")
    if enum and text not in [str(e) for e in enum]:
        listed = ", ".join(map(str, enum))
        _add_error(
            errors, path, f"value '{text}' does not have a value in the enumeration '{listed}'"
        )


def check_object(
    path: str | None,
    schema: Mapping[str, Any],
    value: Mapping[str, Any],
    additional_properties: Any,
    errors: dict[str, str],
) -> None:
    """pve-common JSONSchema.pm ``check_object``. ``name[n]`` keys of the API viewer's
    schema stand for PVE's ``name0``..``nameN`` (each optional)."""

    def sub_path(key: str) -> str:
        return f"{path}.{key}" if path else key

    for key, sub in schema.items():
        if key.endswith("[n]"):
            continue
        check_prop(value.get(key), sub, sub_path(key), errors)
    for key in value:
        sub = prop_schema(schema, key)
        if sub is not None:
            if key not in schema:
                check_prop(value[key], sub, sub_path(key), errors)
            requires = sub.get("requires")
            if isinstance(requires, str) and value.get(requires) is None:
                _add_error(
                    errors,
                    f"{path}.{requires}" if path else requires,
                    f"missing property required by '{sub_path(key)}'",
                )
            elif isinstance(requires, Mapping):
                raise SchemaUnsupported(f"{sub_path(key)}: a schema in 'requires'")
            continue
        if additional_properties is not None and not additional_properties:
            _add_error(errors, sub_path(key), ADDITIONAL)
        elif isinstance(additional_properties, Mapping):
            check_prop(value[key], additional_properties, sub_path(key), errors)


def typed_value(schema: Mapping[str, Any] | None, value: Any) -> Any:
    """A validated value in the JSON type its schema documents (what handlers use)."""
    typ = schema.get("type") if schema else None
    if isinstance(value, list | tuple):
        items = schema.get("items") if schema else None
        return [typed_value(items if isinstance(items, Mapping) else None, v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    if typ == "boolean":
        return int(bool(value)) if isinstance(value, bool) else int(perl_str(value))
    if typ == "integer":
        return int(perl_str(value))
    if typ == "number":
        return float(perl_str(value))
    return perl_str(value)
