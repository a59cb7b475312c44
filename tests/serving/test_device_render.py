"""The device script's units are the inference_service role's: rendered by the role's own
preflight and template (``scripts/device/render-service.yml``), for vLLM 0.20.1.

What ``scripts/serve-gpu-device.py bundle`` carries to the H200 for each serving config;
here for the ngram config (one ansible-playbook run on localhost, nothing changes).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from types import ModuleType

import pytest
from plugins.scripts import load_script

from specops.lab import unit_exec

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    return load_script("serve-gpu-device.py")


def test_the_role_renders_the_device_units_for_vllm_0_20_1(tmp_path: Path) -> None:
    script = _script()
    key = tmp_path / "api-key"
    key.write_text("k3y-for-the-test\n")
    key.chmod(0o600)
    dest = tmp_path / "units"
    rendered = script.render_units(
        dest, engine="vllm", version="0.20.1", venv="/opt/torch/.venv", model="/srv/models/r1b",
        draft="/srv/models/tiny", key_file=key, names=("ngram",),
    )  # fmt: skip
    settings = rendered["ngram"]
    unit_text = (dest / "ngram.service").read_text()
    svc = unit_exec.parse_unit(unit_text)
    env_file = dest / "ngram.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    assert not (dest / "ngram.secrets.json").exists()
    env = svc.final_environment({settings["environment_file"]: env_file.read_text()})
    assert env["VLLM_API_KEY"] == "k3y-for-the-test"  # from the EnvironmentFile only
    assert "k3y-for-the-test" not in unit_text
    assert "k3y-for-the-test" not in json.dumps(settings)
    argv = svc.argv(env)
    assert argv == settings["argv"]
    assert argv[:3] == ["/opt/torch/.venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    i = argv.index("--speculative-config")
    assert json.loads(argv[i + 1]) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
    }  # fmt: skip
    assert "--no-enable-prefix-caching" in argv
    gate = settings["output_gate"]
    assert gate["record"] is False
    assert gate["load"] == script.GATE_LOAD
    assert script.gate_config(gate).load == script.GATE_LOAD
