"""Every Proxmox VE API call the project makes, checked against the PVE 9.1 schema.

Found three ways, so a new call cannot slip by:
1. Python code (``src/``, ``collections/``): calls with a literal path, either
   ``client.call("METHOD", "/path", ...)`` or ``api.get|post|put|delete("/path" or
   f"/path/{x}", ...)``; every one must be declared in its module's ``API_CALLS`` (which
   also names the parameters built at run time), and every declared call must pass
   ``specops.pve_schema.calls_in`` (path, method, parameter names).
2. proxmoxer attribute chains (``proxmox_api.nodes(n).lxc(v).status.start.post()``) in
   the project and in ``community.proxmox``'s ``proxmox`` module, which role
   ``pve_container`` uses: each chain's path and method exist in the schema.
3. The ``community.proxmox.proxmox`` tasks of role ``pve_container``: each option they
   pass maps to an API parameter of ``POST /nodes/{node}/lxc`` that the schema has.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import ansible_collections.community.proxmox as community_proxmox
import yaml

from specops.pve_schema import calls_in, find_endpoint

REPO = Path(__file__).resolve().parents[2]
METHODS = {"get", "post", "put", "delete"}
# Where the calls of a file (or of every file under a folder) are declared.
DECLARING_MODULES = {
    "src/specops/migrate/": "specops.migrate.client",
    "collections/ansible_collections/specops/infra/plugins/modules/pve_container.py": (
        "ansible_collections.specops.infra.plugins.modules.pve_container"
    ),
}


def _template(node: ast.expr, prefixes: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if node.value.startswith("/") else None
    if isinstance(node, ast.JoinedStr):
        out = ""
        for i, part in enumerate(node.values):
            if isinstance(part, ast.Constant):
                out += str(part.value)
            elif isinstance(part, ast.FormattedValue):
                name = ast.unparse(part.value)
                out += prefixes.get(name, "{x}") if i == 0 else "{x}"
        return out if out.startswith("/") else None
    return None


def _code_calls(path: Path) -> list[tuple[str, str, int]]:
    tree = ast.parse(path.read_text())
    prefixes: dict[str, str] = {}
    for node in ast.walk(tree):  # base = f"/nodes/{node}/lxc/{vmid}"
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            t = _template(node.value, {})
            if t:
                prefixes[node.targets[0].id] = t
    found: list[tuple[str, str, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        attr, args = node.func.attr, node.args
        if attr == "call" and len(args) >= 2 and isinstance(args[0], ast.Constant):
            t = _template(args[1], prefixes)
            if t:
                found.append((str(args[0].value).upper(), t, node.lineno))
        elif attr in METHODS and args:
            t = _template(args[0], prefixes)
            if t:
                found.append((attr.upper(), t, node.lineno))
    return found


def _python_files() -> list[Path]:
    files = sorted((REPO / "src").rglob("*.py")) + sorted((REPO / "collections").rglob("*.py"))
    # The lab stand-in answers calls, it makes none. Only code that talks to Proxmox
    # (through proxmoxer, or declaring API_CALLS) is scanned: the benchmark's and the
    # engines' HTTP paths (/tokenize, /version, ...) are not PVE calls.
    return [
        f
        for f in files
        if "/lab/" not in str(f)
        and any(mark in f.read_text() for mark in ("proxmoxer", "API_CALLS"))
    ]


def _same(a: str, b: str) -> bool:
    seg = re.compile(r"\{[^}]*\}")
    return seg.sub("{}", a) == seg.sub("{}", b)


def test_every_python_call_is_declared_and_schema_valid() -> None:
    declared: dict[str, list[tuple[str, str, list[str]]]] = {}
    for rel, mod in DECLARING_MODULES.items():
        if (REPO / rel).exists():
            declared[rel] = importlib.import_module(mod).API_CALLS
    assert "src/specops/migrate/" in declared
    problems = [p for calls in declared.values() for p in calls_in(calls)]
    assert problems == []
    seen = 0
    for path in _python_files():
        rel = str(path.relative_to(REPO))
        owner = next(
            (k for k in declared if rel == k or (k.endswith("/") and rel.startswith(k))), ""
        )
        for method, template, line in _code_calls(path):
            seen += 1
            assert owner, f"{rel}:{line}: {method} {template}: a PVE API call outside API_CALLS"
            find_endpoint(method, template)  # 501 if PVE has no such path/method
            assert any(m == method and _same(t, template) for m, t, _ in declared[owner]), (
                f"{rel}:{line}: {method} {template} is not in its module's API_CALLS"
            )
    assert seen >= 15  # the scan finds the calls (a broken scan must not pass)


_CHAIN = re.compile(
    r"\b(proxmox_api|proxmox_node)((?:\.\w+(?:\([^()]*\))?)+?)\.(get|post|put|delete)\(([^()]*)\)"
)
_SEG = re.compile(r"\.(\w+)(\([^()]*\))?")


def _chains(text: str) -> list[tuple[str, str, list[str]]]:
    # community.proxmox's proxmox module reaches containers as getattr(node, VZ_TYPE).
    text = re.sub(r"getattr\((proxmox_node|self\.proxmox_api), self\.VZ_TYPE\)", r"\1.lxc", text)
    out = []
    for m in _CHAIN.finditer(text):
        path = "/nodes/{x}" if m.group(1) == "proxmox_node" else ""
        for seg in _SEG.finditer(m.group(2)):
            path += f"/{seg.group(1)}" + ("/{x}" if seg.group(2) and seg.group(2) != "()" else "")
        first = m.group(4).split(",")[0].strip()
        if first[:1] in "\"'" and first:
            path += "/" + first.strip("\"'")  # proxmoxer: .get("config") is GET .../config
        elif first and "=" not in first and not first.startswith("*"):
            path += "/{x}"  # proxmoxer: .delete(vmid) is DELETE .../{vmid}
        names = re.findall(r"\b([a-zA-Z][\w]*)=", m.group(4))
        out.append((m.group(3).upper(), path, names))
    return out


def test_community_proxmox_module_calls_exist_in_schema() -> None:
    base = Path(next(iter(community_proxmox.__path__))) / "plugins"
    calls = []
    for rel in ("modules/proxmox.py", "module_utils/proxmox.py"):
        calls += _chains((base / rel).read_text())
    for path in _python_files():
        calls += _chains(path.read_text())
    assert len(calls) >= 10
    problems = calls_in(calls)
    # Found by this test: community.proxmox's state=umount posts .../status/unmount,
    # which the PVE 9.1 schema does not have; role pve_container never uses that state.
    umount = "Method 'POST /nodes/{x}/lxc/{x}/status/unmount' not implemented"
    assert umount in problems
    assert "umount" not in "".join(p.read_text() for p in (REPO / "roles").rglob("*.yml"))
    assert [p for p in problems if p != umount] == [], problems


# community.proxmox.proxmox option -> the PVE API parameter it becomes (its module's
# create code: disk_volume/disk -> rootfs, mount_volumes/mounts -> mpN, netif -> netN,
# pubkey -> ssh-public-keys); None: module control, not sent as a parameter.
OPTION_TO_PARAM: dict[str, str | None] = {
    "hostname": "hostname",
    "ostemplate": "ostemplate",
    "cores": "cores",
    "memory": "memory",
    "swap": "swap",
    "unprivileged": "unprivileged",
    "onboot": "onboot",
    "features": "features",
    "disk_volume": "rootfs",
    "disk": "rootfs",
    "mount_volumes": "mp0",
    "mounts": "mp0",
    "netif": "net0",
    "pubkey": "ssh-public-keys",
    "storage": "storage",
    "tags": "tags",
    "vmid": "vmid",
    "node": None,
    "state": None,
    "update": None,
    "timeout": None,
    "api_host": None,
    "api_port": None,
    "api_user": None,
    "api_token_id": None,
    "api_token_secret": None,
    "validate_certs": None,
    "ca_file": None,
    "force": "force",
}


def test_pve_container_community_proxmox_options_map_to_schema() -> None:
    tasks_dir = REPO / "roles" / "pve_container" / "tasks"
    used: set[str] = set()
    for f in tasks_dir.glob("*.yml"):
        stack = list(yaml.safe_load(f.read_text()) or [])
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                for key, value in item.items():
                    if key == "community.proxmox.proxmox" and isinstance(value, dict):
                        used |= set(value)
                    elif isinstance(value, (list, dict)):
                        stack.append(value)
            elif isinstance(item, list):
                stack.extend(item)
    assert used, "role pve_container calls community.proxmox.proxmox"
    unknown = sorted(used - set(OPTION_TO_PARAM))
    assert unknown == [], (
        f"map these community.proxmox.proxmox options to API parameters: {unknown}"
    )
    params = sorted({p for o in used if (p := OPTION_TO_PARAM[o])})
    assert calls_in([("POST", "/nodes/{node}/lxc", params)]) == []
