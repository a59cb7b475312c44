"""Every Proxmox VE API call the project makes, checked against the PVE 9.1 schema.

The calls are found by parsing the code (``pve_api_scan``: an AST walk over every Python
file in ``src/``, ``lab/src/`` and ``collections/``, whatever it imports), not by file
name:

1. proxmoxer attribute chains (``prox.nodes(n).lxc(v).status.start.post()``), the
   wrappers whose path comes from their parameters (``PveClient.call``, ``Api.get``), and
   every call of those wrappers with the path resolved from literals, f-strings and
   variables. A path the scan cannot resolve fails the test with its ``file:line``.
2. Each call's METHOD and path exist in the schema, with its parameter names; a call
   whose parameter names are built at run time (``**mounts``) must be declared in its
   module's ``API_CALLS`` (which names them); every declared call is made somewhere.
3. ``community.proxmox``'s ``proxmox`` module (which role ``pve_container`` uses), with
   the same scan; and the options the role passes to it map to schema parameters.
"""

from __future__ import annotations

import re
from pathlib import Path

import ansible_collections.community.proxmox as community_proxmox
import yaml
from pve_api_scan import ScanResult, scan

from specops_lab.pve_schema import ApiError, calls_in, find_endpoint

REPO = Path(__file__).resolve().parents[2]


def _project_files() -> list[tuple[Path, str]]:
    """Every Python file of the project under src/, lab/src/ and collections/; ansible-test's
    output (tests/output: its delegation venv while sanity runs, git-ignored) is not."""
    return [
        (path, str(path.relative_to(REPO)))
        for top in ("src", "lab/src", "collections")
        for path in sorted((REPO / top).rglob("*.py"))
        if "tests/output" not in path.relative_to(REPO).as_posix()
    ]


def _same(a: str, b: str) -> bool:
    seg = re.compile(r"\{[^}]*\}")
    return seg.sub("{}", a) == seg.sub("{}", b)


def _check(result: ScanResult) -> list[str]:
    """Everything wrong with the calls found: unknown paths, parameters, declarations."""
    problems = list(result.problems)
    for owner, declared in result.declared.items():
        problems += [f"{owner}: API_CALLS: {p}" for p in calls_in(declared)]
    for call in result.calls:
        try:
            find_endpoint(call.method, call.template)
        except ApiError as exc:
            problems.append(f"{call.where}: {exc.message}")
            continue
        problems += [
            f"{call.where}: {p}" for p in calls_in([(call.method, call.template, call.params)])
        ]
        declared = result.declared.get(call.owner)
        if declared is None:
            if call.dynamic_params:
                problems.append(
                    f"{call.where}: {call.method} {call.template} passes **parameters: declare "
                    f"their names in an API_CALLS list of {call.owner}"
                )
            continue
        entry = [d for d in declared if d[0] == call.method and _same(d[1], call.template)]
        if not entry:
            problems.append(
                f"{call.where}: {call.method} {call.template} is not in {call.owner}'s API_CALLS"
            )
        elif not set(call.params) <= set(entry[0][2]):
            extra = sorted(set(call.params) - set(entry[0][2]))
            problems.append(
                f"{call.where}: parameters {extra} missing from {call.owner}'s API_CALLS"
            )
    for owner, declared in result.declared.items():
        made = [c for c in result.calls if c.owner == owner]
        for method, template, _ in declared:
            if not any(c.method == method and _same(c.template, template) for c in made):
                problems.append(
                    f"{owner}: API_CALLS lists {method} {template}, which no code makes"
                )
    return problems


def test_every_api_call_site_is_found_by_parsing_and_is_in_the_schema() -> None:
    files = _project_files()
    assert len(files) > 80  # every Python file, not a selection
    result = scan(files)
    assert _check(result) == []
    # The scan sees the calls (a broken scan must not pass): the two wrappers, both
    # modules' declarations, and the calls made through them from several files.
    assert {(w.owner_class, w.name) for w in result.wrappers} >= {
        ("PveClient", "call"),
        ("Api", "get"),
        ("Api", "put"),
        ("Api", "post"),
    }
    assert len(result.calls) >= 30
    assert len({c.file for c in result.calls}) >= 5
    assert set(result.declared) == {
        "src/specops/migrate/client.py",
        "collections/ansible_collections/specops/infra/plugins/modules/pve_container.py",
    }


PLANTED = """
from typing import Any

from proxmoxer import ProxmoxAPI


def connect() -> ProxmoxAPI:
    return ProxmoxAPI("pve.example", user="root@pam", token_name="t", token_value="v")


def bad_calls(node: str, vmid: int, where: Any) -> None:
    prox = connect()
    path = input()
    prox.nodes(node).lxc(vmid).status.start.post()  # fine
    prox.nodes(node).lxc(vmid).status.frobnicate.post()  # no such endpoint
    prox.nodes(node).lxc(vmid).config.put(colour="red")  # no such parameter
    prox(path).get()  # a path the scan cannot resolve
    getattr(prox.nodes(node), where)(vmid).config.get()  # nor this one
    base = f"/nodes/{node}/lxc/{vmid}"
    prox(base + "/migrate").post(target="pve2", online=1, live=1)  # 'live' is no parameter


class Client:
    def __init__(self) -> None:
        self.px = connect()

    def call(self, method: str, path: str, **params: Any) -> Any:
        return getattr(self.px(path), method.lower())(**params)


def through_a_wrapper(client: Client, other: Any) -> None:
    client.call("GET", "/cluster/resources", type="vm")  # fine
    client.call("GET", "/cluster/resourcez")  # no such endpoint
    client.call("PUT", "/nodes/pve1/lxc/101/config", **{"mp0": "x"})  # names unknown here
    other.call("GET", "/nodes")  # a receiver of unknown type
"""


def test_the_scan_fails_on_planted_bad_calls(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    result = scan([(planted, "planted.py")])

    def line(text: str) -> int:
        return next(i for i, ln in enumerate(PLANTED.splitlines(), start=1) if text in ln)

    assert sorted(_check(result)) == sorted(
        [
            f"planted.py:{line('frobnicate')}: Method 'POST /nodes/{{x}}/lxc/{{x}}/status/"
            "frobnicate' not implemented",
            f"planted.py:{line('colour')}: PUT /nodes/{{x}}/lxc/{{x}}/config: parameter "
            "'colour': property is not defined in schema and the schema does not allow "
            "additional properties",
            f"planted.py:{line('prox(path)')}: a proxmoxer call whose path or method cannot "
            "be resolved",
            f"planted.py:{line('getattr(prox')}: a proxmoxer call whose path or method cannot "
            "be resolved",
            f"planted.py:{line('live=1')}: POST /nodes/{{x}}/lxc/{{x}}/migrate: parameter "
            "'live': property is not defined in schema and the schema does not allow "
            "additional properties",
            f"planted.py:{line('resourcez')}: Method 'GET /cluster/resourcez' not implemented",
            f"planted.py:{line('**{')}: PUT /nodes/pve1/lxc/101/config passes **parameters: "
            "declare their names in an API_CALLS list of planted.py",
            f"planted.py:{line('other.call')}: 'other.call' looks like a PVE API call but the "
            "receiver's type is unknown (annotate it)",
        ]
    )
    assert [(w.owner_class, w.name, w.method, w.path) for w in result.wrappers] == [
        ("Client", "call", 0, 1)
    ]
    fine = {(c.method, c.template) for c in result.calls}
    assert ("POST", "/nodes/{x}/lxc/{x}/status/start") in fine
    assert ("GET", "/cluster/resources") in fine


def _community_scan() -> ScanResult:
    base = Path(next(iter(community_proxmox.__path__))) / "plugins"
    files = [
        (base / rel, f"community.proxmox/{rel}")
        for rel in ("modules/proxmox.py", "module_utils/proxmox.py")
    ]
    # Third-party code: its ProxmoxAPI handle comes from a helper method, and the guest
    # type is chosen at run time ("openvz" before PVE 4, else "lxc"): told here.
    hints = {
        rel: {"roots": ["self.proxmox_api"], "constants": {"self.VZ_TYPE": "lxc"}}
        for _, rel in files
    }
    return scan(files, hints)


def test_community_proxmox_module_calls_exist_in_schema() -> None:
    result = _community_scan()
    assert result.problems == []
    assert len(result.calls) >= 20
    problems = calls_in([(c.method, c.template, c.params) for c in result.calls])
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
