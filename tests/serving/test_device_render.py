"""The device script's units are the inference_service role's: rendered by the role's own
preflight and template (``scripts/device/render-service.yml``), for vLLM 0.20.1.

What ``scripts/device/serve-gpu-device.py bundle`` carries to the H200 for each serving config;
here for the ngram config (one ansible-playbook run on localhost, nothing changes).
"""

from __future__ import annotations

import itertools
import json
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from plugins.scripts import load_script

from specops_lab import unit_exec

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    return load_script("device/serve-gpu-device.py")


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


def test_the_sglang_unit_keeps_its_key_off_every_command_line(tmp_path: Path) -> None:
    """SGLang takes its key from --api-key only: the role's unit writes it from the
    EnvironmentFile into a 0600 YAML file of the service's runtime directory and names
    that file with --config. Here the unit's ExecStartPre runs as systemd would (its
    words expanded from the unit's final environment), into a tmp runtime directory."""
    script = _script()
    script.use_engine("sglang")
    secret = "k3y 'with' \"quotes\", a #hash: and $dollar\\"  # noqa: S105 (a test value)
    key = tmp_path / "api-key"
    key.write_text(secret + "\n")
    key.chmod(0o600)
    dest = tmp_path / "units"
    rendered = script.render_units(
        dest, engine="sglang", version="0.5.11", venv="/opt/torch/.venv", model="/srv/models/r1b",
        draft="/srv/models/tiny", key_file=key, names=("plain",),
    )  # fmt: skip
    unit_text = (dest / "plain.service").read_text()
    svc = unit_exec.parse_unit(unit_text)
    env_file = dest / "plain.env"
    env = svc.final_environment({rendered["plain"]["environment_file"]: env_file.read_text()})
    assert env["SPECOPS_API_KEY"] == secret  # from the root-only EnvironmentFile
    assert secret not in unit_text
    argv = svc.argv(env)
    assert "--api-key" not in argv
    assert all(secret not in word for word in argv)
    config = argv[argv.index("--config") + 1]
    assert svc.runtime_paths() == [str(Path(config).parent)]
    assert svc.runtime_directory_mode == 0o700
    assert config.startswith("/run/")
    assert config.endswith(".yaml")  # SGLang's merger refuses another suffix
    # SGLang's launcher finds its venv's ninja and CUDA's nvcc by name (flashinfer's JIT).
    assert env["PATH"].split(":")[:2] == ["/opt/torch/.venv/bin", "/usr/local/cuda/bin"]

    (pre,) = [p for p in svc.exec_start_pre if not p.privileged]
    words = unit_exec.expand_command(pre.words, env)
    assert all(secret not in word for word in words)  # the writer's own command line
    assert words[0] == "/opt/torch/.venv/bin/python"
    assert words[-1] == config
    written = tmp_path / "run" / "secrets.yaml"
    written.parent.mkdir()
    subprocess.run([sys.executable, *words[1:-1], str(written)], env=env, check=True, timeout=60)
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    # What SGLang's ConfigArgumentMerger reads (yaml.safe_load) and turns into --api-key.
    assert yaml.safe_load(written.read_text()) == {"api-key": secret}


def test_the_sglang_oracle_campaign_renders_every_method_for_its_engine(tmp_path: Path) -> None:
    """``--engine sglang --campaign oracle``: the oracle configs through the one translator
    for SGLang 0.5.11 (MiMo's NEXTN with its own folder as draft path, NGRAM without
    vLLM's prompt-lookup bounds, DFLASH's block size) and the engine arguments that let
    several SGLang servers share a card (a high static fraction under a token cap)."""
    script = _script()
    script.use_engine("sglang")
    script.use_campaign("oracle")
    assert script.WORK == script.SGLANG_ORACLE_WORK
    assert script.BENCH["api"] == "sglang-generate"
    key = tmp_path / "api-key"
    key.write_text("k3y-for-the-test\n")
    key.chmod(0o600)
    names = ("mtp-3", "ngram", "dflash")
    rendered = script.render_units(
        tmp_path / "units", engine="sglang", version="0.5.11", venv="/opt/torch/.venv",
        model="/srv/models/r1b", draft="/srv/models/tiny", key_file=key, names=names,
    )  # fmt: skip

    def flags(name: str) -> dict[str, str]:
        argv = rendered[name]["argv"]
        return {a: b for a, b in itertools.pairwise(argv) if a.startswith("--speculative-")}

    home = script.ORACLE_HOME
    assert flags("mtp-3") == {
        "--speculative-algorithm": "NEXTN",
        "--speculative-draft-model-path": f"{home}/mimo/target",  # MiMo is not self-drafting
        "--speculative-num-steps": "3",
        "--speculative-eagle-topk": "1",
        "--speculative-num-draft-tokens": "4",
    }
    assert flags("ngram") == {
        "--speculative-algorithm": "NGRAM", "--speculative-num-draft-tokens": "4",
    }  # fmt: skip
    assert flags("dflash")["--speculative-algorithm"] == "DFLASH"
    assert flags("dflash")["--speculative-draft-model-path"] == f"{home}/llama/dflash"
    for name in names:
        argv = rendered[name]["argv"]
        assert argv[argv.index("--max-total-tokens") + 1] == "65536"
        assert argv[argv.index("--mem-fraction-static") + 1] == "0.85"
        assert argv[argv.index("--model-path") + 1] == script.CONFIGS[name]["model"]
