"""specops_lab.pve_schema / pve_jsonschema / pve_formats against PVE's own rules.

Each expectation below is what PVE's code (pve-common JSONSchema.pm and the format
validators named in specops_lab.pve_formats) answers for the same input; a test that breaks
names the upstream function to re-read.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from specops_lab.pve.api import LabApi
from specops_lab.pve_formats import (
    CODE_FORMATS,
    HASH_FORMATS,
    FormatError,
    SchemaUnsupported,
    perl_pattern,
    split_list,
)
from specops_lab.pve_jsonschema import (
    PropertyStringError,
    check_format,
    check_prop,
    format_names,
    generate_typetext,
    parse_property_string,
    print_property_string,
)
from specops_lab.pve_schema import ApiError, check_call, find_endpoint, load_schema

SCHEMA = load_schema()
PROJECT_CALL_MODULES = (
    "specops.migrate.client",
    "ansible_collections.specops.infra.plugins.modules.pve_container",
)


def _walk_schemas(node: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if isinstance(node, dict):
        out.append(node)
        for value in node.values():
            out += _walk_schemas(value)
    elif isinstance(node, list):
        for value in node:
            out += _walk_schemas(value)
    return out


def _reachable_endpoints() -> set[tuple[str, str]]:
    """Endpoints the lab stand-in answers plus every call the project declares."""
    found = set(LabApi(Path("/nonexistent"), {})._routes)
    for module in PROJECT_CALL_MODULES:
        for method, template, _ in importlib.import_module(module).API_CALLS:
            found.add((method, find_endpoint(method, template).template))
    return found


def _base(fmt: str) -> str:
    m = re.match(r"^(.*?)(?:-(list|opt))?$", fmt)
    assert m is not None
    return m.group(1)


def test_every_format_a_project_call_can_reach_is_implemented() -> None:
    reachable: set[str] = set()
    for method, template in _reachable_endpoints():
        reachable |= format_names(SCHEMA[template][method].get("parameters", {}))
    assert len(reachable) >= 25  # the walk sees property-string sub-keys and items too
    missing = sorted(f for f in reachable if _base(f) not in CODE_FORMATS | HASH_FORMATS)
    assert missing == []


def test_an_unimplemented_format_is_a_clear_error_not_a_pass() -> None:
    # qemu's ide[n] is a property string whose 'file' key has this (unimplemented) format.
    with pytest.raises(SchemaUnsupported, match="format 'pve-volume-id-or-qm-path' is used"):
        check_call("PUT", "/nodes/pve1/qemu/100/config", {"ide0": "local:iso/x.iso,media=cdrom"})
    with pytest.raises(SchemaUnsupported, match="format 'no-such-format'"):
        check_prop("x", {"type": "string", "format": "no-such-format"}, "p", {})


def test_every_schema_pattern_translates_and_perl_only_syntax_is_refused_by_name() -> None:
    patterns = {s["pattern"] for s in _walk_schemas(SCHEMA) if isinstance(s.get("pattern"), str)}
    assert len(patterns) >= 60
    for pattern in patterns:
        perl_pattern(pattern)  # raises SchemaUnsupported naming a pattern that cannot
    # (?^i:...) is Perl's "defaults plus i" group: case-insensitive inside only.
    tags = perl_pattern(r"(?^i:[a-z0-9_][a-z0-9_\-\+\.]*)(?:;(?^i:[a-z0-9_][a-z0-9_\-\+\.]*))*")
    assert tags.search("Prod;GPU")
    assert perl_pattern(r"(?^i:a(?^:b))").search("Ab")
    assert not perl_pattern(r"(?^i:a(?^:b))").search("AB")  # (?^:) resets the i flag
    # PVE matches m/^$pattern$/ with the pattern interpolated as is: a top-level '|'
    # binds as in Perl, so "acl-and-more" passes the first alternative's '^acl...'.
    acl = r"(?:(?:(?:acl|properties|entry);)*(?:acl|properties|entry))|none"
    assert perl_pattern(acl).search("acl-and-more")
    assert not perl_pattern(acl).search("xnonex")
    with pytest.raises(SchemaUnsupported, match=r"pattern '\(\?\{ 1 \}\)x'"):
        perl_pattern("(?{ 1 })x")
    with pytest.raises(SchemaUnsupported, match=r"pattern '\(\?P=y\)' .* does not compile"):
        perl_pattern("(?P=y)")


# (format, value PVE accepts, value PVE refuses, PVE's message for the refusal)
FORMAT_CASES = [
    ("pve-node", "pve-a", "pve_a", "value does not look like a valid node name"),
    ("pve-vmid", "100", "99", "value does not look like a valid VM ID"),
    ("pve-storage-id", "local-zfs", "l", "storage ID 'l' cannot be shorter than 2 characters"),
    ("pve-storage-id", "local", "local:", "storage ID 'local:' contains illegal characters"),
    ("pve-configid", "mp0", "m", "invalid configuration ID 'm'"),
    ("pve-configid-list", "mp0,dev1;net0 cores", "mp0,lxc.mount", "invalid configuration ID"),
    ("pve-vmid-list", "100,101", "100,abc", "value does not look like a valid VM ID"),
    ("mac-addr", "BC:24:11:00:00:01", "01:00:5e:00:00:01", "valid unicast MAC address"),
    ("ipv4", "10.0.0.1", "10.0.0.256", "value does not look like a valid IPv4 address"),
    ("ipv6", "fe80::1", "fe80:::1", "value does not look like a valid IPv6 address"),
    ("ip", "::ffff:10.0.0.1", "localhost", "value does not look like a valid IP address"),
    ("CIDRv4", "10.0.0.0/8", "10.0.0.0/7", "valid IPv4 CIDR network"),
    ("CIDRv6", "fd00::/64", "fd00::/129", "valid IPv6 CIDR network"),
    ("CIDR", "fd00::/8", "10.0.0.0", "value does not look like a valid CIDR network"),
    ("pve-ipv4-config", "dhcp", "10.0.0.1", "valid ipv4 network configuration"),
    ("pve-ipv6-config", "auto", "fe80::1", "valid ipv6 network configuration"),
    ("ipv4mask", "255.255.255.0", "255.0.255.0", "value does not look like a valid IP netmask"),
    ("email", "a.b@example.com", "a@", "value does not look like a valid email address"),
    ("email-or-username-list", "root,a@b.c", "root,a@", "valid email address or user name"),
    ("dns-name", "llm1.lab", "llm_1", "value does not look like a valid DNS name"),
    ("dns-name-list", "a.lab b.lab", "a.lab -b", "value does not look like a valid DNS name"),
    ("address", "pve.lab", "-x", "value does not look like a valid address: -x"),
    ("pve-iface", "vmbr0.10", "0eth", "invalid network interface name '0eth'"),
    ("pve-vlan-id-or-range", "2-4094", "10-5", "VLAN range must go from lower to higher"),
    ("disk-size", "8G", "8GB", "value does not look like a valid disk size: 8GB"),
    ("pve-startup-order", "order=1,up=30", "first", "unable to parse startup options"),
    ("pve-tag-list", "gpu;llm", "gpu;b@d", "invalid characters in tag"),
    ("lxc-ip-with-ll-iface-list", "fe80::1%eth0 1.1.1.1", "fe80::1%0", "valid IP address"),
    ("pve-ct-timezone", "host", "Mars/Olympus", "invalid time zone 'Mars/Olympus'"),
    ("pve-ct-timezone", "Europe/Vienna", "UTC+1", "invalid time zone 'UTC+1'"),
    ("pve-lxc-mp-string", "/srv/models", "/srv/../etc", "contains illegal character sequences"),
    ("pve-lxc-dev-string", "/dev/nvidia0", "/sys/x", "/sys/x is not a valid device path"),
    ("pve-volume-id", "local:vztmpl/x.tar", "/var/x", "unable to parse volume ID '/var/x'"),
    ("pve-storage-content", "rootdir", "disk", "invalid content type 'disk'"),
    ("pve-storage-content-list", "vztmpl,backup", "vztmpl,x", "invalid content type 'x'"),
    ("pve-poolid", "a/b/c", "a/b/c/d", "nested too deeply (max levels = 3)"),
    # each entry alone (PVE: "this only checks a single list entry"), so "1,local" passes
    ("storage-pair-list", "1,local", "local:zfs:x", "entry 'local:zfs:x' contains invalid ID"),
    ("storage-pair", "local", "local:x", "storage ID 'x' cannot be shorter than 2"),
    ("urlencoded", "a%20b", "a b", "invalid urlencoded string: a b"),
    ("email-opt", "", "x", "value does not look like a valid email address"),
]


@pytest.mark.parametrize(("fmt", "good", "bad", "message"), FORMAT_CASES)
def test_named_formats_follow_their_upstream_validators(
    fmt: str, good: str, bad: str, message: str
) -> None:
    check_format(fmt, good)
    with pytest.raises(FormatError, match=re.escape(message)):
        check_format(fmt, bad)


def test_hash_formats_and_dict_formats_match_the_schema_typetext() -> None:
    """The schema's ``typetext`` is PVE's generate_typetext of the registered hash, so the
    copies in HASH_FORMATS and the dict formats in the schema must reproduce it."""
    checked = 0
    for template, methods in SCHEMA.items():
        for info in methods.values():
            for name, prop in info.get("parameters", {}).get("properties", {}).items():
                fmt, typetext = prop.get("format"), prop.get("typetext")
                if typetext is None or not (isinstance(fmt, dict) or fmt in HASH_FORMATS):
                    continue
                assert generate_typetext(fmt) == typetext, (template, name)
                checked += 1
    assert checked >= 100
    names = {
        p.get("format")
        for m in SCHEMA.values()
        for i in m.values()
        for p in i.get("parameters", {}).get("properties", {}).values()
        if isinstance(p.get("format"), str)
    }
    assert set(HASH_FORMATS) <= names


DEV = find_endpoint("PUT", "/nodes/{node}/lxc/{vmid}/config").properties["dev[n]"]["format"]
MP = find_endpoint("PUT", "/nodes/{node}/lxc/{vmid}/config").properties["mp[n]"]["format"]


def test_property_strings_follow_parse_property_string() -> None:
    assert parse_property_string(DEV, "/dev/nvidia0,mode=0666,deny-write=yes") == {
        "path": "/dev/nvidia0",
        "mode": "0666",
        "deny-write": 1,
    }
    # No quoting: a ',' always splits (a quoted value with a comma is two parts).
    with pytest.raises(FormatError, match='invalid key in comma-separated list property: b"'):
        parse_property_string(MP, 'local:1,mp="/a,b"=c')
    with pytest.raises(FormatError, match="duplicate key in comma-separated list property: path"):
        parse_property_string(DEV, "/dev/a,/dev/b")
    with pytest.raises(FormatError, match="duplicate key in comma-separated list property: uid"):
        parse_property_string(DEV, "/dev/a,uid=1,uid=2")
    with pytest.raises(FormatError, match="missing key in comma-separated list property"):
        parse_property_string(DEV, "/dev/a,=x")
    with pytest.raises(FormatError, match="value without key, but schema does not define"):
        parse_property_string(HASH_FORMATS["backup-performance"][0], "5")
    with pytest.raises(PropertyStringError) as exc:
        parse_property_string(DEV, "/dev/a,mode=666,uid=-1", "dev0")
    assert exc.value.errors == {
        "dev0.mode": "value does not match the regex pattern",
        "dev0.uid": "value must have a minimum value of 0",
    }
    with pytest.raises(PropertyStringError) as exc:
        parse_property_string(MP, "local:1", "mp0")
    assert exc.value.errors == {"mp0.mp": "property is missing and it is not optional"}
    # Hash formats with their validators (pve-storage validate_prune_backups).
    assert parse_property_string("prune-backups", "keep-last=0") == {"keep-all": 1}
    with pytest.raises(FormatError, match="keep-all cannot be set together"):
        parse_property_string("prune-backups", "keep-all=1,keep-last=3")
    with pytest.raises(FormatError, match="only accepts hash based named formats"):
        parse_property_string("pve-node", "x")


def test_print_property_string_orders_as_pve_and_round_trips() -> None:
    data = {"uid": "0", "path": "/dev/nvidia0", "deny-write": 1, "mode": "0660"}
    text = print_property_string(data, DEV)
    assert text == "/dev/nvidia0,deny-write=1,mode=0660,uid=0"
    assert parse_property_string(DEV, text) == {**data, "uid": "0"}
    mp = {"volume": "local:100/x.raw", "mp": "/m", "size": 8 * 1024**3, "ro": 1}
    assert print_property_string(mp, MP) == "local:100/x.raw,mp=/m,ro=1,size=8G"
    with pytest.raises(FormatError, match="illegal value with commas for mp"):
        print_property_string({"volume": "x", "mp": "/a,b"}, MP)


def test_split_list_is_pve_split_list() -> None:
    assert split_list(" a, b;c  d") == ["a", "b", "c", "d"]
    assert split_list("a b\0c") == ["a b", "c"]
    assert split_list("") == []


def test_check_call_errors_are_pves() -> None:
    def errors(method: str, path: str, params: dict[str, Any]) -> dict[str, str]:
        with pytest.raises(ApiError) as exc:
            check_call(method, path, params)
        assert exc.value.status == 400
        assert exc.value.message == "Parameter verification failed."
        return exc.value.errors or {}

    base = "/nodes/pve1/lxc/101"
    # Booleans are 1/0 (or JSON true/false) only: check_type 'boolean'.
    assert errors("POST", f"{base}/migrate", {"target": "pve2", "restart": "true"}) == {
        "restart": "type check ('boolean') failed - got 'true'"
    }
    _, typed = check_call("POST", f"{base}/migrate", {"target": "pve2", "restart": True})
    assert typed["restart"] == 1
    # A URI parameter given again with another value (PVE::HTTPServer::rest_handler).
    assert errors("GET", f"{base}/config", {"vmid": "102"}) == {
        "vmid": "duplicate parameter (already defined in URI) with conflicting values!"
    }
    # Format errors carry the validator's die text, newline included.
    assert errors("POST", "/nodes/pve1/vzdump", {"vmid": "101,x"}) == {
        "vmid": "invalid format - value does not look like a valid VM ID\n"
    }
    # A repeated form key for a '-list' format is joined (normalize_legacy_param_formats);
    # for a plain string it is an ARRAY and fails the type check.
    _, typed = check_call("POST", "/nodes/pve1/vzdump", {"vmid": ["101", "102"]})
    assert typed["vmid"] == "101,102"
    assert errors("PUT", f"{base}/config", {"hostname": ["a", "b"]}) == {
        "hostname": "type check ('string') failed - got ARRAY"
    }
    # 'requires': unique needs restore (POST /nodes/{node}/lxc).
    assert errors("POST", "/nodes/pve1/lxc", {"vmid": 101, "ostemplate": "x:y", "unique": 1}) == {
        "restore": "missing property required by 'unique'"
    }
    # Array items: each element checked against 'items' (here a property string).
    mapping = {
        "id": "gpu",
        "map": ["id=10de:2204,node=pve1,path=0000:01:00.0", "id=10de:2204,node=pve1,colour=red"],
    }
    assert errors("POST", "/cluster/mapping/pci", mapping) == {
        "map[1]": "invalid format - invalid key in comma-separated list property: colour\n"
    }
    bulk = {"vms": ["100", "99"]}
    assert errors("POST", "/cluster/bulk-action/guest/start", bulk) == {
        "vms[1]": "invalid format - value does not look like a valid VM ID\n"
    }
    _, typed = check_call("POST", "/cluster/bulk-action/guest/start", {"vms": "100"})
    assert typed["vms"] == [100]  # a scalar for an array parameter becomes a list
    # Order of checks as check_prop: the format before the pattern, maxLength, enum.
    assert errors("PUT", f"{base}/config", {"hostname": "a_b" * 30}) == {
        "hostname": "invalid format - value does not look like a valid DNS name\n"
    }
    assert errors("PUT", f"{base}/config", {"lock": "frozen"})["lock"].startswith(
        "value 'frozen' does not have a value in the enumeration 'backup, create"
    )


def test_additional_properties_only_refused_where_the_schema_says_so() -> None:
    # check_object refuses extra keys only when additionalProperties is defined and false.
    assert "additionalProperties" not in SCHEMA["/cluster/sdn/fabrics/all"]["GET"]["parameters"]
    _, typed = check_call("GET", "/cluster/sdn/fabrics/all", {"not-in-schema": "1"})
    assert typed["not-in-schema"] == "1"
    agent = SCHEMA["/nodes/{node}/qemu/{vmid}/agent"]["GET"]["parameters"]
    assert agent["additionalProperties"] == 1
    check_call("GET", "/nodes/pve1/qemu/100/agent", {"extra": "1"})
    with pytest.raises(ApiError) as refused:
        check_call("GET", "/version", {"not-in-schema": "1"})
    assert refused.value.errors == {
        "not-in-schema": "property is not defined in schema and the schema does not allow "
        "additional properties"
    }
