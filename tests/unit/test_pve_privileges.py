"""The PVE API token: a dedicated user's privilege-separated token whose role holds
exactly what specops's API calls need (computed from the PVE 9.1 schema), shown in the
README with the pveum commands; host key checking on except in the lab inventory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from ansible_collections.specops.infra.plugins.modules.pve_container import (
    API_CALLS as CONTAINER_CALLS,
)

from specops.migrate.client import API_CALLS as MIGRATE_CALLS
from specops_lab.pve_schema import privileges_of, pveum_commands

REPO = Path(__file__).resolve().parents[2]


def _needed() -> set[str]:
    return {
        p
        for m, t, params in MIGRATE_CALLS + CONTAINER_CALLS
        for p in privileges_of(m, t, params).privileges
    }


def test_privileges_come_from_the_schema_for_the_parameters_sent() -> None:
    assert privileges_of("POST", "/nodes/{node}/lxc/{vmid}/migrate", ["target"]).privileges == (
        "VM.Migrate",
    )
    # vzdump's rules are prose: only the sentences about what is sent count.
    plain = privileges_of("POST", "/nodes/{node}/vzdump", ["vmid", "storage", "mode"])
    assert plain.privileges == ("Datastore.AllocateSpace", "VM.Backup")
    throttled = privileges_of("POST", "/nodes/{node}/vzdump", ["vmid", "bwlimit"])
    assert "Sys.Modify" in throttled.privileges
    assert privileges_of("POST", "/nodes/{node}/vzdump", ["vmid", "dumpdir"]).root_only
    assert privileges_of("GET", "/nodes/{node}/lxc", []).privileges == ("VM.Audit",)
    assert privileges_of("GET", "/nodes/{node}/tasks/{upid}/log", []).privileges == ("Sys.Audit",)
    config = privileges_of("PUT", "/nodes/{node}/lxc/{vmid}/config", ["mp0", "cores"])
    assert "VM.Config.Disk" in config.privileges
    assert config.root_only == (
        "non-volume mount points in rootfs and mp[n] are restricted to root@pam",
    )


def test_readme_shows_the_computed_role_and_a_privsep_token() -> None:
    text = (REPO / "README.md").read_text()
    block = re.search(
        r"<!-- pve-privileges:start -->\n```sh\n(.*?)```\n<!-- pve-privileges:end -->", text, re.S
    )
    assert block is not None, "README has no pve-privileges block"
    assert block.group(1) == pveum_commands(sorted(_needed())) + "\n"
    assert "--privsep 1" in block.group(1)
    assert _needed() == {
        "Datastore.AllocateSpace", "Datastore.Audit", "Sys.Audit", "Sys.Modify",
        "VM.Allocate", "VM.Audit", "VM.Backup", "VM.Config.CPU", "VM.Config.Disk",
        "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.Migrate",
        "VM.PowerMgmt",
    }  # fmt: skip


def test_example_inventory_uses_the_dedicated_token_never_root() -> None:
    example = REPO / "inventory" / "example"
    for path in example.rglob("*.yml"):
        text = path.read_text()
        assert "--privsep 0" not in text, path
        assert "root@pam" not in text, path
    container = yaml.safe_load((example / "group_vars/serving/pve_container.yml").read_text())
    migrate = yaml.safe_load((example / "group_vars/all/migrate.yml").read_text())
    assert (container["pve_container_api_user"], container["pve_container_api_token_id"]) == (
        "specops@pve",
        "automation",
    )
    assert (migrate["migrate_api_user"], migrate["migrate_api_token_id"]) == (
        "specops@pve",
        "automation",
    )


def _host_key_checking(inventory: str) -> object:
    """What Ansible resolves for the ssh plugin's host_key_checking for a host there."""
    env = {k: v for k, v in os.environ.items() if k != "ANSIBLE_HOST_KEY_CHECKING"}
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    config = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-config"), "dump", "--only-changed",
         "--format", "json"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    changed = {i["name"]: i["value"] for i in json.loads(config.stdout) if "name" in i}
    hostvars = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", inventory, "--list"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    values = {
        v.get("ansible_host_key_checking", changed.get("HOST_KEY_CHECKING", True))
        for v in json.loads(hostvars.stdout)["_meta"]["hostvars"].values()
    }
    assert len(values) == 1, values
    return values.pop()


def test_host_key_checking_is_on_except_in_the_lab() -> None:
    assert _host_key_checking("inventory/example") is True
    assert _host_key_checking("inventory/lab") is False
