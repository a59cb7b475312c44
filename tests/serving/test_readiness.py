"""Readiness checks on bodies recorded from the real vLLM 0.32 CPU server, and the wait."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from ansible_collections.specops.infra.plugins.module_utils.readiness import (
    check_completion,
    check_models,
    probe,
    wait_ready,
)


def _fixture(fixtures_dir: Path, name: str) -> str:
    return (fixtures_dir / "serving" / name).read_text()


def test_models_lists_the_served_name(fixtures_dir: Path) -> None:
    body = _fixture(fixtures_dir, "vllm-0.32.0-cpu-v1-models.json")
    ok, ids, _ = check_models(body, "tiny-qwen")
    assert ok
    assert ids == ["tiny-qwen"]


def test_models_without_the_served_name_fail_naming_both(fixtures_dir: Path) -> None:
    body = _fixture(fixtures_dir, "vllm-0.32.0-cpu-v1-models.json")
    ok, _ids, detail = check_models(body, "qwen3.6-27b")
    assert not ok
    assert "tiny-qwen" in detail
    assert "qwen3.6-27b" in detail


def test_models_body_that_is_not_a_list_fails() -> None:
    ok, _, detail = check_models('{"error": "x"}', "tiny-qwen")
    assert not ok
    assert "not an OpenAI model list" in detail


def test_completion_with_one_token_passes(fixtures_dir: Path) -> None:
    ok, _text, tokens, _ = check_completion(
        _fixture(fixtures_dir, "vllm-0.32.0-cpu-v1-completions.json")
    )
    assert ok
    assert tokens == 1


def test_completion_without_tokens_fails(fixtures_dir: Path) -> None:
    data = json.loads(_fixture(fixtures_dir, "vllm-0.32.0-cpu-v1-completions.json"))
    data["usage"]["completion_tokens"] = 0
    ok, _, _, detail = check_completion(json.dumps(data))
    assert not ok
    assert "completion_tokens is 0" in detail
    ok, _, _, detail = check_completion('{"choices": []}')
    assert not ok
    assert "no choice" in detail


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_probe_of_a_closed_port_fails_at_health() -> None:
    result = probe(f"http://127.0.0.1:{_closed_port()}", "tiny-qwen", request_timeout=1)
    assert not result.ok
    assert result.stage == "health"
    assert "cannot connect" in result.detail


def test_wait_gives_up_at_the_deadline() -> None:
    now = [0.0]
    result = wait_ready(
        f"http://127.0.0.1:{_closed_port()}",
        "tiny-qwen",
        timeout=10,
        interval=2,
        request_timeout=1,
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert not result.ready
    assert result.attempts == 6  # at t = 0, 2, 4, 6, 8, 10
    assert result.last.stage == "health"


def test_a_failed_unit_ends_the_wait_early() -> None:
    result = wait_ready(
        f"http://127.0.0.1:{_closed_port()}",
        "tiny-qwen",
        timeout=600,
        request_timeout=1,
        unit_state=lambda: "failed",
        sleep=lambda _s: None,
    )
    assert not result.ready
    assert result.attempts == 1
    assert "the unit is failed" in result.last.detail
