"""The PVE API token secret during playbooks/migrate.yml, and the playbook's --check.

The real playbook against the PVE API stand-in (schema-checked, token-authenticated)
and two simulated node trees (the lab's pve-a and pve-b in known states,
tests/fixtures/hosts/lab-converged); no LXC is needed, as the preflight only reads (the
container is a conf on pve-b). Every CLI step of the playbook gets the secret the same way.
While each run lasts, every process's /proc/<pid>/cmdline is read every few ms: the
secret must never be there (an `environment:` of a task puts it into the remote
`/bin/sh -c 'PROXMOX_TOKEN_SECRET=... python ...'`), nor in the -vvv output; the copy
the controller CLI reads is 0600 in a 0700 state directory.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from plugins.secret_scan import CmdlineScan

from specops_lab.hosttree import build_tree, load_spec
from specops_lab.pve.layout import Cluster
from specops_lab.pve.testing import ApiHandle, make_test_cluster, running_api

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VMID = 701


@dataclass(frozen=True)
class ApiLab:
    cluster: Cluster
    api: ApiHandle
    base: Path


@pytest.fixture(scope="module")
def api_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiLab]:
    base = tmp_path_factory.mktemp("secrets")
    cluster = make_test_cluster(base, None, names=("pve-a", "pve-b"))
    for name in ("pve-a", "pve-b"):
        spec = load_spec(REPO / f"tests/fixtures/hosts/lab-converged/{name}.yml")
        build_tree(spec, cluster.node(name).root, device_nodes=False)
    cluster.node("pve-b").ct_conf(VMID).write_text(
        "arch: amd64\nhostname: secret-test\nmemory: 512\nostype: debian\n"
        f"rootfs: local:{VMID}/subvol-{VMID}-disk-0.subvol,size=1G\n"
    )
    with running_api(cluster.dir) as api:
        yield ApiLab(cluster, api, base)


def _inventory(lab: ApiLab, tmp: Path, vaulted: str = "", **settings: object) -> Path:
    inv = tmp / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "pve_nodes": {"hosts": {"pve-a": None, "pve-b": None}},
                        "serving": {"hosts": {}},
                    }
                }
            }
        )
    )
    (inv / "group_vars" / "pve_nodes.yml").write_text(
        yaml.safe_dump(
            {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "specops_host_root": str(lab.base) + "/{{ inventory_hostname }}",
            }
        )
    )
    values: dict[str, object] = {
        "migrate_vmid": VMID,
        "migrate_source": "pve-b",
        "migrate_target": "pve-a",
        "migrate_gpu_model": "NVIDIA RTX A6000",
        "migrate_gpu_count": 2,
        "migrate_api_host": "127.0.0.1",
        "migrate_api_port": lab.api.port,
        "migrate_api_ca_file": str(lab.api.cert),
        "migrate_state_dir": str(tmp / "state"),
    }
    values.update(settings)
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(values) + vaulted)
    return inv


def _vault(tmp: Path, name: str, secret: str) -> tuple[str, Path]:
    """``name: !vault |`` text for ``secret`` (ansible-vault encrypt_string, the secret on
    its standard input) and the 0600 password file that opens it."""
    password = tmp / "vault-pass"
    password.write_text("a-test-vault-password\n")
    password.chmod(0o600)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string",
         "--vault-password-file", str(password), "--stdin-name", name],
        input=secret, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return result.stdout, password


def _playbook(
    inv: Path, *args: str, env_secret: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PROXMOX_TOKEN_SECRET", None)
    if env_secret is not None:
        env["PROXMOX_TOKEN_SECRET"] = env_secret
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env["ANSIBLE_FORCE_COLOR"] = "0"
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _assert_secret_kept(result: subprocess.CompletedProcess[str], scan: CmdlineScan) -> None:
    secret = scan.secret.decode()
    assert scan.hits == [], "\n".join(scan.hits)
    assert secret not in result.stdout
    assert secret not in result.stderr


def test_token_secret_from_the_environment_never_on_a_command_line(
    api_lab: ApiLab, tmp_path: Path
) -> None:
    secret = api_lab.api.token_value  # the real one: the API calls must succeed with it
    inv = _inventory(api_lab, tmp_path)
    with CmdlineScan(secret, markers=("migrate\0preflight",)) as scan:
        result = _playbook(
            inv, "-vvv", "playbooks/migrate.yml", "--tags", "migrate_preflight", env_secret=secret
        )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    # The CLI authenticated with the secret (the API stand-in answered it)...
    assert "2 free 'NVIDIA RTX A6000' on pve-a: 0000:01:00.0, 0000:02:00.0" in out
    # ... the scan ran while the CLI's processes lived, and never saw the secret.
    assert scan.seen["migrate\0preflight"] > 0, scan.seen
    print(f"{scan.scans} scans of /proc/*/cmdline")
    _assert_secret_kept(result, scan)
    state = tmp_path / "state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    copies = [p for p in state.iterdir() if secret in p.read_text(errors="replace")]
    assert [(p.name, stat.S_IMODE(p.stat().st_mode)) for p in copies] == [
        (f"migrate-{VMID}.token", 0o600)
    ]


def test_check_mode_runs_the_preflight_and_changes_nothing(api_lab: ApiLab, tmp_path: Path) -> None:
    """--check: the read-only preflight runs and says what the move would do; nothing
    after it is simulated (it needs the move), and nothing is written on the cluster.
    The secret comes from the inventory here, vaulted (a plain-text one is refused by the
    preflight)."""
    secret = api_lab.api.token_value
    vaulted, password = _vault(tmp_path, "migrate_api_token_secret", secret)
    inv = _inventory(api_lab, tmp_path, vaulted=vaulted)
    confs = {p: p.read_bytes() for p in api_lab.base.rglob("*.conf")}
    with CmdlineScan(secret, markers=("migrate\0preflight",)) as scan:
        result = _playbook(
            inv, "-vvv", "playbooks/migrate.yml", "--check", "--diff",
            "--vault-password-file", str(password),
        )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "check mode: the preflight passed" in out
    assert "0000:01:00.0, 0000:02:00.0" in out
    # the plan, across the callback's folding of long lines at spaces
    assert re.search(r"plan:\s+CT\s+701\s+moves\s+pve-b\s+->\s+pve-a\s+\(migrate\)", out)
    for task in ("Bring the container to the target", "Write the migration report"):
        assert f"migrate : {task}" not in out  # every phase after the preflight ends at once
    assert scan.seen["migrate\0preflight"] > 0
    _assert_secret_kept(result, scan)
    assert {p: p.read_bytes() for p in api_lab.base.rglob("*.conf")} == confs
    assert not (tmp_path / "state" / f"migrate-{VMID}.json").exists()  # no state recorded
