"""Plan validation: defaults, token counts, errors that name the field, clipping."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from specops.bench.client import make_client
from specops.bench.plan import (
    DEFAULT_CONCURRENCY,
    changed_fields,
    clip_context_lengths,
    complete,
    load_plan,
    parse_token_count,
    plan_from_mapping,
    read_api_key,
)
from specops.errors import ValidationError
from specops_lab import network


def test_defaults() -> None:
    plan = plan_from_mapping({"base_url": "http://127.0.0.1:8000/v1/"})
    assert plan.base_url == "http://127.0.0.1:8000"
    assert plan.concurrency == DEFAULT_CONCURRENCY == (1, 2, 4, 8, 16, 32, 64, 100)
    assert plan.context_lengths == (1024, 8192, 30720, 61440, 122880)
    assert plan.temperature is None
    assert plan.ignore_eos is False


def test_token_counts() -> None:
    assert parse_token_count("8K", "x") == 8192
    assert parse_token_count("8k", "x") == 8192
    assert parse_token_count(500, "x") == 500
    with pytest.raises(ValidationError, match=r"^x: must be a token count"):
        parse_token_count("lots", "x")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, r"^base_url: is required"),
        ({"base_url": "127.0.0.1:8000"}, r"^base_url: must be an http\(s\) URL"),
        ({"base_url": "http://h:1", "api": "grpc"}, r"^api: must be one of completions, chat"),
        ({"base_url": "http://h:1", "concurrency": [1, 0]}, r"^concurrency\[1\]: must be"),
        ({"base_url": "http://h:1", "context_lengths": "1K,x"}, r"^context_lengths\[1\]: "),
        ({"base_url": "http://h:1", "output_len": 0}, r"^output_len: must be an integer >= 1"),
        ({"base_url": "http://h:1", "slo": {"ttft_ms": -1}}, r"^slo\.ttft_ms: must be > 0"),
        ({"base_url": "http://h:1", "slo": {"ttft": 1}}, r"^slo\.ttft: unknown field"),
        ({"base_url": "http://h:1", "roofline": {"tp_size": 0}}, r"^roofline\.tp_size: must"),
        ({"base_url": "http://h:1", "roofline": {"gpus": "x"}}, r"^roofline\.gpus: unknown"),
        ({"base_url": "http://h:1", "waves_per_cell": -1}, r"^waves_per_cell: must be an"),
        ({"base_url": "http://h:1", "concurency": [1]}, r"^concurency: unknown field"),
        ({"base_url": "http://h:1", "ignore_eos": "yes"}, r"^ignore_eos: must be true or false"),
        ({"base_url": "http://h:1", "prompt_file": "/nonexistent"}, r"^prompt_file: no such"),
    ],
)
def test_errors_name_the_field(data: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        plan_from_mapping(data)


def test_yaml_file_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "plan.yml"
    path.write_text("base_url: http://127.0.0.1:1\nconcurrency: [4, 1]\ncontext_lengths: [1K]\n")
    plan = load_plan(path, {"output_len": 32, "model": None})
    assert plan.concurrency == (1, 4)
    assert plan.context_lengths == (1024,)
    assert plan.output_len == 32
    path.write_text("- a list\n")
    with pytest.raises(ValidationError, match=r"^plan: .* must hold a mapping"):
        load_plan(path)


def test_plan_from_stdin_is_saved_as_given_once_it_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "base_url: http://127.0.0.1:1\nconcurrency: [2]\n"
    saved = tmp_path / "results" / "ct" / "plan.yml"
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    plan = load_plan("-", {"output_len": 16}, save_to=saved)
    assert plan.concurrency == (2,)
    assert plan.output_len == 16
    assert saved.read_text() == text  # as given: flags are not folded in
    # A plan that does not validate is not saved over the last good one.
    monkeypatch.setattr("sys.stdin", io.StringIO("concurrency: [2]\n"))
    with pytest.raises(ValidationError, match=r"^base_url: "):
        load_plan("-", save_to=saved)
    assert saved.read_text() == text
    monkeypatch.setattr("sys.stdin", io.StringIO("- a list\n"))
    with pytest.raises(ValidationError, match=r"^plan: standard input must hold a mapping"):
        load_plan("-")


def test_clip_to_max_model_len() -> None:
    ctx, notes = clip_context_lengths((1024, 8192, 30720), 256, 4096)
    assert ctx == (1024, 3840)
    assert len(notes) == 2
    assert clip_context_lengths((1024,), 256, None) == ((1024,), [])
    with pytest.raises(ValidationError, match=r"^output_len: "):
        clip_context_lengths((1024,), 4096, 4096)


def test_complete_fills_the_model_and_clips_and_changed_fields_name_the_rest() -> None:
    plan = plan_from_mapping({"base_url": "http://127.0.0.1:8000", "context_lengths": [1024, 8192],
                              "output_len": 256, "context_over_limit": "clip"})  # fmt: skip
    done, notes = complete(plan, "served-model", 4096)
    assert (done.model, done.context_lengths, len(notes)) == ("served-model", (1024, 3840), 1)
    named, _ = complete(plan_from_mapping({**plan.to_dict(), "model": "mine"}), "other", None)
    assert named.model == "mine"
    assert named.context_lengths == (1024, 8192)
    recorded = done.to_dict()  # as results.json keeps it, read back
    assert changed_fields(recorded, done) == []
    assert changed_fields(recorded, plan) == ["context_lengths", "model"]


def test_api_key_file_gives_every_request_its_bearer_and_must_be_private(tmp_path: Path) -> None:
    key = tmp_path / "api-key"
    key.write_text("s3cr3t-key\n")
    key.chmod(0o600)
    ct801 = network.load().address(33)  # the lab's own container address (nothing dials it)
    plan = plan_from_mapping({"base_url": f"http://{ct801}:8000", "api_key_file": str(key)})
    assert plan.api_key_file == str(key)
    client = make_client(plan, 2)
    assert client.headers["Authorization"] == "Bearer s3cr3t-key"
    key.chmod(0o644)
    with pytest.raises(
        ValidationError, match=r"api_key_file: .* is readable by others \(mode 0644\)"
    ):
        read_api_key(str(key))
    with pytest.raises(ValidationError, match="api_key_file: cannot read"):
        read_api_key(str(tmp_path / "absent"))
