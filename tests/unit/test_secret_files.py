"""The ``*_file`` variants of the secrets that roles took only as values (issue 33: AWX's
credential types inject files, never values, see awx/credential_types/): the PVE API
token secret (pve_container_api_token_secret_file) and the Hugging Face token
(inference_engine_hf_token_file). Each role's own ``vars/main.yml`` is templated by
ansible-playbook on localhost: the value wins, else the file's content (trimmed), else
(the PVE token) the controller's PROXMOX_TOKEN_SECRET. Results go to files, never to
the output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from plugins.scripts import REPO

BIN = Path(sys.executable).parent

CASES = {
    "pve_container": ("__pve_container_api_token_secret", "pve_container_api_token_secret"),
    "inference_engine": ("__inference_engine_hf_token", "inference_engine_hf_token"),
}


def _resolve(tmp_path: Path, role: str, cases: list[dict[str, str]], env_secret: str) -> list[str]:
    resolved, _ = CASES[role]
    tasks = []
    for i, case in enumerate(cases):
        tasks += [
            {"name": f"Case {i}.", "ansible.builtin.set_fact": case},
            {"name": f"Resolve {i}.", "ansible.builtin.copy": {
                "content": f"{{{{ {resolved} | to_json }}}}", "dest": str(tmp_path / f"{i}.json"),
                "mode": "0600"}},
        ]  # fmt: skip
    play = [{"name": "Resolve.", "hosts": "localhost", "gather_facts": False,
             "vars_files": [str(REPO / f"roles/{role}/defaults/main.yml"),
                            str(REPO / f"roles/{role}/vars/main.yml")],
             "tasks": tasks}]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env |= {"PROXMOX_TOKEN_SECRET": env_secret, "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           str(tmp_path / "play.yml")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for secret in ("from-the-file", "from-the-var", env_secret):
        assert secret not in done.stdout + done.stderr
    return [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(len(cases))]


@pytest.mark.parametrize("role", sorted(CASES))
def test_a_secret_file_is_read_when_the_value_is_empty(role: str, tmp_path: Path) -> None:
    _, value_var = CASES[role]
    secret = tmp_path / "secret"
    secret.write_text("from-the-file\n")
    secret.chmod(0o600)
    cases = [
        {value_var: "", f"{value_var}_file": str(secret)},
        {value_var: "from-the-var", f"{value_var}_file": str(secret)},
        {value_var: "", f"{value_var}_file": ""},
    ]
    got = _resolve(tmp_path, role, cases, env_secret="from-the-env")  # noqa: S106 (a test value)
    # The PVE token falls back to the controller's environment, the hub token to none.
    last = "from-the-env" if role == "pve_container" else ""
    assert got == ["from-the-file", "from-the-var", last]


@pytest.mark.parametrize("role", sorted(CASES))
def test_the_file_variant_is_declared_documented_and_not_a_secret_value(role: str) -> None:
    """defaults, argument_specs (a path: not no_log, so the preflight's plain-text-secret
    rule does not apply to it) and the role's README name it."""
    _, value_var = CASES[role]
    name = f"{value_var}_file"
    defaults = yaml.safe_load((REPO / f"roles/{role}/defaults/main.yml").read_text())
    assert defaults[name] == ""
    specs = yaml.safe_load((REPO / f"roles/{role}/meta/argument_specs.yml").read_text())
    option = specs["argument_specs"]["main"]["options"][name]
    assert option["type"] == "str"
    assert not option.get("no_log")
    readme = (REPO / f"roles/{role}/README.md").read_text()
    assert name in readme
