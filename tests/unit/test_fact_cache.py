"""The fact cache holds no secret and only its owner reads it (ansible.cfg's
``fact_caching = specops.infra.private_jsonfile``).

A tiny playbook runs with the repository's ansible.cfg against localhost (a local
connection: the facts are gathered in a process that has the controller's environment,
as every localhost play and the lab's local nodes do) with known secrets in the
environment; the cache folder is then scanned: no file holds a secret, the folder is
0700 and every file 0600. The play proves the secrets were gathered (``ansible_env``
within the run), and a second run proves the cache still serves the other facts.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.cache.private_jsonfile import without_secrets

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

GATHER = """\
- name: Facts gathered in a process with the controller's environment.
  hosts: localhost
  gather_facts: true
  tasks:
    - name: The gathered environment holds the secrets (so the cache could have).
      ansible.builtin.assert:
        that:
          - ansible_env.PROXMOX_TOKEN_SECRET == lookup('env', 'PROXMOX_TOKEN_SECRET')
          - ansible_env.HF_TOKEN == lookup('env', 'HF_TOKEN')
        quiet: true
    - name: Gather again the way a role does (gather_subset min includes env).
      ansible.builtin.setup:
        gather_subset: [min]
    - name: A fact set cacheable by a task.
      ansible.builtin.set_fact:
        specops_probe: kept
        cacheable: true
"""

FROM_CACHE = """\
- name: Facts read back from the cache (no gathering).
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The cache serves the facts, without the environment.
      ansible.builtin.assert:
        that:
          - ansible_facts.hostname is defined
          - specops_probe == 'kept'
          - ansible_env is not defined
        quiet: true
"""


def _run(tmp: Path, name: str, play: str, cache: Path, env_secrets: dict[str, str]) -> None:
    book = tmp / f"{name}.yml"
    book.write_text(play)
    env = {
        **os.environ,
        **env_secrets,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(cache),
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-local"),
        "ANSIBLE_HOME": str(tmp / "ansible-home"),
    }
    env.pop("ANSIBLE_CACHE_PLUGIN", None)  # the repository's ansible.cfg decides
    run = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(book)],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]


def _scan(cache: Path, values: list[str]) -> list[str]:
    """Each problem of the cache folder: a file holding a secret, a mode that lets a
    user other than the owner in."""
    problems = []
    for path in [cache, *sorted(cache.rglob("*"))]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            problems.append(f"{path}: mode {mode:04o}")
        if path.is_file():
            data = path.read_bytes()
            problems.extend(f"{path}: holds {v[:6]}..." for v in values if v.encode() in data)
    return problems


def test_the_fact_cache_holds_no_secret_and_is_private(tmp_path: Path) -> None:
    env_secrets = {
        "PROXMOX_TOKEN_SECRET": f"pve-{secrets.token_hex(16)}",
        "HF_TOKEN": f"hf_{secrets.token_hex(16)}",
        "SPECOPS_TEST_API_KEY": f"sk-{secrets.token_hex(16)}",
    }
    values = list(env_secrets.values())
    cache = tmp_path / "cache" / "facts"
    # What ansible's plain jsonfile cache left before: a 0755 folder, a 0644 file that
    # holds the gathered environment.
    cache.mkdir(parents=True, mode=0o755)
    cache.chmod(0o755)
    old = cache / "s1_old-node"
    old_facts = {"ansible_env": dict(env_secrets), "ansible_hostname": "old-node"}
    old.write_text(json.dumps({"__payload__": json.dumps(old_facts)}))
    old.chmod(0o644)
    assert len(_scan(cache, values)) == 5  # the scan sees it all: 2 modes, 3 secrets

    _run(tmp_path, "gather", GATHER, cache, env_secrets)
    files = sorted(p.name for p in cache.iterdir())
    assert any(name.endswith("localhost") for name in files), files
    assert _scan(cache, values) == []
    cleaned = json.loads(json.loads(old.read_text())["__payload__"])
    assert cleaned == {"ansible_hostname": "old-node"}

    _run(tmp_path, "from-cache", FROM_CACHE, cache, env_secrets)
    assert _scan(cache, values) == []


def test_a_missing_cache_folder_is_made_private(tmp_path: Path) -> None:
    cache = tmp_path / "new" / "facts"
    token = f"pve-{secrets.token_hex(16)}"
    _run(tmp_path, "gather", GATHER, cache, {"PROXMOX_TOKEN_SECRET": token, "HF_TOKEN": "hf_x" * 4})
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert _scan(cache, [token]) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"ansible_env": {"A": "1"}, "ansible_os_family": "D"}, {"ansible_os_family": "D"}),
        ({"env": {"A": "1"}, "hostname": "n"}, {"hostname": "n"}),
        ({"__payload__": json.dumps({"ansible_env": {}, "x": 1})}, {"__payload__": '{"x": 1}'}),
        ({"__payload__": json.dumps({"x": 1})}, {"__payload__": json.dumps({"x": 1})}),
        ({"__payload__": "not json"}, {"__payload__": "not json"}),
        ("text", "text"),
    ],
)  # fmt: skip
def test_without_secrets(value: object, expected: object) -> None:
    before = json.dumps(value)
    assert without_secrets(value) == expected
    assert json.dumps(value) == before  # the in-memory facts are left as they are
