"""The real lab vLLM CPU server: speculation shows in its counters, start/stop are clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from specops.errors import SpecopsError
from specops_lab.vllm import (
    LabPaths,
    VllmServer,
    read_spec_decode_counters,
    server_status,
)
from specops_lab.vllm_model import build_info, build_model, model_dir

REPO = Path(__file__).resolve().parents[2]

# Real code with a repeated shape, so prompt lookup (ngram) finds its n-grams.
CODE_PROMPT = """def fizzbuzz(n):
    for i in range(1, n + 1):
        if i % 15 == 0:
            print("FizzBuzz")
        elif i % 3 == 0:
            print("Fizz")
        elif i % 5 == 0:
            print("Buzz")
        else:
            print(i)


def fizzbuzz_list(n):
    out = []
    for i in range(1, n + 1):
        if i % 15 == 0:
            out.append("FizzBuzz")
        elif i % 3 == 0:
            out.append("Fizz")
        elif i % 5 == 0:
            out.append("Buzz")
        else:
            out.append(str(i))
    return out


def fizzbuzz_dict(n):
    out = {}
    for i in range(1, n + 1):
        if i % 15 == 0:
"""


def stream(base_url: str, path: str, body: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """POST a streaming request; return the content pieces and the final usage."""
    pieces: list[str] = []
    usage: dict[str, Any] | None = None
    done = False
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    timeout = httpx.Timeout(120.0, connect=5.0)
    with (
        httpx.Client(timeout=timeout) as client,
        client.stream("POST", f"{base_url}{path}", json=body) as response,
    ):
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if chunk.get("usage") and not chunk["choices"]:
                usage = chunk["usage"]
                continue
            for choice in chunk["choices"]:
                text = choice.get("text") or (choice.get("delta") or {}).get("content")
                if text:
                    pieces.append(text)
    assert done, "stream ended without data: [DONE]"
    assert usage is not None, "no usage chunk although include_usage was asked for"
    return pieces, usage


def test_ngram_speculation_accepts_tokens(vllm_ngram_server: VllmServer) -> None:
    server = vllm_ngram_server
    before = read_spec_decode_counters(server.base_url)
    pieces, usage = stream(
        server.base_url,
        "/v1/completions",
        {"model": server.model_name, "prompt": CODE_PROMPT, "max_tokens": 64, "temperature": 0},
    )
    delta = read_spec_decode_counters(server.base_url).minus(before)

    assert usage["completion_tokens"] == 64
    assert "".join(pieces)
    assert delta.drafts > 0
    assert delta.accepted_tokens > 0, f"no draft token accepted: {delta}"
    assert delta.accepted_tokens <= delta.draft_tokens
    assert sum(delta.accepted_per_position.values()) == delta.accepted_tokens
    assert sorted(delta.accepted_per_position) == [0, 1, 2]
    # Accepted drafts arrive together: fewer content chunks than tokens.
    assert len(pieces) < usage["completion_tokens"]


def test_chat_template_streams_on_ngram_server(vllm_ngram_server: VllmServer) -> None:
    server = vllm_ngram_server
    messages = [{"role": "user", "content": "Write fizzbuzz in Python, then again."}]
    pieces, usage = stream(
        server.base_url,
        "/v1/chat/completions",
        {"model": server.model_name, "messages": messages, "max_tokens": 32, "temperature": 0},
    )
    assert usage["completion_tokens"] > 0
    assert pieces
    # ChatML: "<|im_start|>user\n...<|im_end|>\n<|im_start|>assistant\n" adds tokens.
    plain = httpx.post(
        f"{server.base_url}/tokenize",
        json={"model": server.model_name, "prompt": messages[0]["content"]},
        timeout=30,
    ).json()["count"]
    assert usage["prompt_tokens"] >= plain + 6


def test_draft_model_same_model_accepts_every_draft(vllm_draft_server: VllmServer) -> None:
    server = vllm_draft_server
    before = read_spec_decode_counters(server.base_url)
    _, usage = stream(
        server.base_url,
        "/v1/completions",
        {"model": server.model_name, "prompt": CODE_PROMPT, "max_tokens": 48, "temperature": 0},
    )
    delta = read_spec_decode_counters(server.base_url).minus(before)
    assert usage["completion_tokens"] == 48
    assert delta.draft_tokens > 0
    # The draft is the target itself, decoding greedily: every draft token is accepted.
    assert delta.accepted_tokens == delta.draft_tokens
    assert delta.mean_acceptance_length == pytest.approx(1 + 3)


def test_model_build_is_deterministic(vllm_lab: LabPaths, tmp_path: Path) -> None:
    cached = model_dir(vllm_lab)
    again = build_model(vllm_lab, out=tmp_path / "again")
    assert again.changed
    assert build_info(again.path)["files"] == build_info(cached)["files"]
    assert build_model(vllm_lab).changed is False  # the cached one is reused


def _no_group(pid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if fields[2] == str(pid) and fields[0] != "Z":
                return False
    return True


def _serving_on(port: int) -> list[int]:
    """Pids of any process whose command line is a vllm serve on ``port``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in argv and b"--port" in argv and str(port).encode() in argv:
                pids.append(int(entry.name))
    return pids


def test_server_that_dies_reports_its_log(vllm_lab: LabPaths, tmp_path: Path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"architectures": ["NoSuchModel"]}))
    server = VllmServer(paths=vllm_lab, model=broken, startup_timeout=240)
    with pytest.raises(SpecopsError) as err:
        server.start()
    message = str(err.value)
    assert f"vllm server on port {server.port} exited with code" in message
    assert "Traceback" in message or "Error" in message  # the log's tail is shown
    assert not server.pidfile.exists()
    assert _serving_on(server.port) == []


def test_start_timeout_stops_what_it_started(vllm_lab: LabPaths) -> None:
    server = VllmServer(paths=vllm_lab, startup_timeout=3, enforce_eager=True)
    with pytest.raises(SpecopsError, match=r"not healthy after 3 s"):
        server.start()
    assert not server.pidfile.exists()
    assert server_status(vllm_lab, server.port) == [{"port": server.port, "running": False}]
    assert _serving_on(server.port) == []


def test_cli_start_status_stop(vllm_lab: LabPaths) -> None:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'lab/src'}:{REPO / 'collections'}"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "specops.cli", "lab", "vllm", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
        )

    started = cli("start", "--spec", "none", "--enforce-eager", "--cache", str(vllm_lab.root))
    assert started.returncode == 0, started.stderr
    port = int(started.stdout.split("stop --port ")[1].split()[0])
    try:
        status = cli("status", "--json", "--port", str(port), "--cache", str(vllm_lab.root))
        assert status.returncode == 0, status.stderr
        (entry,) = json.loads(status.stdout)
        assert entry["running"]
        assert entry["healthy"]
        assert entry["spec"]["method"] == "none"
        pid = int(entry["pid"])
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
        assert models["data"][0]["id"] == "tiny-qwen"
        assert models["data"][0]["max_model_len"] == 8192
        again = cli("start", "--port", str(port), "--cache", str(vllm_lab.root))
        assert again.returncode == 2
        assert "already has a lab server" in again.stderr
    finally:
        stopped = cli("stop", "--port", str(port), "--cache", str(vllm_lab.root))
    assert stopped.returncode == 0, stopped.stderr
    assert f"port {port}: stopped" in stopped.stdout
    assert _no_group(pid), "engine processes of the stopped server remain"
    assert cli("status", "--port", str(port), "--cache", str(vllm_lab.root)).returncode == 1


def test_peer_vllm_bench_serve_runs_from_the_lab_venv(
    vllm_ngram_server: VllmServer, tmp_path: Path
) -> None:
    """The venv's own `vllm bench serve` (needs the dist-info fix) measures the server."""
    server = vllm_ngram_server
    proc = subprocess.run(
        [
            str(server.paths.vllm_bin),
            "bench",
            "serve",
            "--backend",
            "openai",
            "--base-url",
            server.base_url,
            "--endpoint",
            "/v1/completions",
            "--model",
            server.model_name,
            "--tokenizer",
            str(server.model),
            "--dataset-name",
            "random",
            "--random-input-len",
            "64",
            "--random-output-len",
            "32",
            "--num-prompts",
            "4",
            "--max-concurrency",
            "2",
            "--seed",
            "0",
            "--save-result",
            "--result-dir",
            str(tmp_path),
            "--result-filename",
            "bench.json",
        ],
        env={**server.env(), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["completed"] == 4
    assert result["total_output_tokens"] > 0
