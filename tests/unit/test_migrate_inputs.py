"""The migration's inputs refused on the controller before anything changes (issue 49).

``playbooks/migrate.yml --check`` on a copy of the example inventory, whose API is never
reached (a closed port): a missing CA file, a token secret file that does not exist, no
token secret at all. Each is refused by the migration's first play on the controller
with the variable named and what to do, and nothing is written: no state directory (a
check run writes none even when its inputs are right), the inventory byte for byte.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example"
CA = "migrate_api_ca_file"

# row id -> (family, whether the CA file is there, extra variables ({t}: the row's
# directory), the message's start, text it holds)
ROWS: dict[str, tuple[str, bool, dict[str, Any], str, str]] = {
    "no-ca-file": ("migration", False, {},
                   f"{CA}: no CA file {{t}}/inventory/files/pve-root-ca.pem",
                   "copy a node's /etc/pve/pve-root-ca.pem there"),
    "token-file-missing": ("migration", True, {"migrate_api_token_secret_file": "{t}/nope.token"},
                           "no PVE API token secret: migrate_api_token_secret_file {t}/nope.token",
                           "is missing or empty"),
    "no-token-secret": ("migration", True, {"PROXMOX_TOKEN_SECRET": None},
                        "no PVE API token secret: set migrate_api_token_secret",
                        "PROXMOX_TOKEN_SECRET"),
}  # fmt: skip


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _site(tmp_path: Path, *, ca: bool) -> Path:
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, inventory)
    if ca:
        (inventory / "files").mkdir()
        (inventory / "files" / "pve-root-ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    return inventory


def _migrate(tmp_path: Path, inventory: Path, extra: dict[str, Any]) -> tuple[int, str]:
    variables = {
        "migrate_vmid": 129, "migrate_source": "gpu-node-01", "migrate_target": "gpu-node-02",
        "migrate_api_host": "127.0.0.1", "migrate_api_port": _closed_port(),
        "migrate_state_dir": str(tmp_path / "state"),
        **{k: v for k, v in extra.items() if k.startswith("migrate_")},
    }  # fmt: skip
    filled = json.loads(json.dumps(variables).replace("{t}", str(tmp_path)))
    # The secret from the controller's environment (as the example says), unless the row
    # takes it away.
    env = {k: v for k, v in os.environ.items() if k != "PROXMOX_TOKEN_SECRET"}
    if "PROXMOX_TOKEN_SECRET" not in extra:
        env["PROXMOX_TOKEN_SECRET"] = "t0ken-4-test"  # noqa: S105 (a test value)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         "playbooks/migrate.yml", "--check", "-e", json.dumps(filled)],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
        env={**env, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


@pytest.mark.parametrize(("family", "ca", "extra", "start", "text"), ROWS.values(), ids=ROWS.keys())
def test_the_migration_refuses_its_inputs_before_anything_changes(  # noqa: PLR0917
    tmp_path: Path, family: str, ca: bool, extra: dict[str, Any], start: str, text: str
) -> None:
    assert family == "migration"
    inventory = _site(tmp_path, ca=ca)
    before = {p: p.read_bytes() for p in inventory.rglob("*") if p.is_file()}
    rc, out = _migrate(tmp_path, inventory, extra)
    assert rc != 0, out[-3000:]
    assert start.replace("{t}", str(tmp_path)) in out, out[-3000:]
    assert text in out, out[-3000:]
    assert "Nothing has changed." in out
    assert "t0ken-4-test" not in out
    assert not (tmp_path / "state").exists()
    assert {p: p.read_bytes() for p in inventory.rglob("*") if p.is_file()} == before


def test_a_check_run_writes_nothing_even_when_its_inputs_are_right(tmp_path: Path) -> None:
    """The control: with the CA and the secret in place, the check run gets as far as
    asking the cluster (a closed port here: it fails there, naming the API), and neither
    the state directory nor any spec, secret or facts file was written."""
    inventory = _site(tmp_path, ca=True)
    rc, out = _migrate(tmp_path, inventory, {})
    assert rc != 0, out[-3000:]
    assert "Stop when the cluster could not be asked" in out, out[-3000:]
    assert "127.0.0.1" in out  # the API it could not reach, named
    assert "no CA file" not in out
    assert "no PVE API token secret" not in out
    assert "t0ken-4-test" not in out
    assert not (tmp_path / "state").exists()


def test_the_cli_reads_spec_secret_and_facts_from_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--stdin``: one JSON object (spec, token secret, facts) and no file: a spec with
    no secret file and no environment secret reaches the API (a closed port: exit 1
    naming it), the secret never printed, nothing written beside."""
    from specops import cli  # noqa: PLC0415

    port = _closed_port()
    bundle = {
        "spec": {"vmid": 129, "target": "pve-b", "source": "pve-a",
                 "state_dir": str(tmp_path / "s"),
                 "api": {"host": "127.0.0.1", "port": port, "token_secret_env": ""}},
        "token_secret": "stdin-s3cret",
        "facts": {"target": {"gpus": []}, "source": None},
    }  # fmt: skip
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(bundle)))
    monkeypatch.delenv("PROXMOX_TOKEN_SECRET", raising=False)
    assert cli.main(["migrate", "locate", "--stdin", "--json"]) == 1
    out, err = capsys.readouterr()
    assert f"no answer from 127.0.0.1:{port}" in err, err
    assert "stdin-s3cret" not in out + err
    assert list(tmp_path.iterdir()) == []
    # the control: the same without the secret stops before the API, naming it
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({**bundle, "token_secret": ""})))
    assert cli.main(["migrate", "locate", "--stdin", "--json"]) == 2
    assert "no API token secret" in capsys.readouterr().err
