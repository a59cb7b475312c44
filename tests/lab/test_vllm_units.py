"""Lab vLLM pieces that need no server: spec configs, metrics parsing, pidfile safety."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specops.cli import main
from specops.errors import ValidationError
from specops_lab.vllm import (
    SpecConfig,
    SpecDecodeCounters,
    VllmServer,
    lab_paths,
    parse_spec_decode_counters,
    server_status,
    stop_port,
)

METRICS = (
    Path(__file__).resolve().parents[1] / "fixtures" / "lab" / "vllm-0.32-cpu-metrics-ngram.txt"
)


def test_ngram_config_is_vllm_032_json() -> None:
    spec = SpecConfig("ngram", num_speculative_tokens=5, prompt_lookup_min=1, prompt_lookup_max=3)
    assert spec.vllm_config(Path("/m")) == {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "prompt_lookup_max": 3,
        "prompt_lookup_min": 1,
    }


def test_draft_model_defaults_to_the_served_model() -> None:
    assert SpecConfig("draft_model").vllm_config(Path("/models/tiny")) == {
        "method": "draft_model",
        "model": "/models/tiny",
        "num_speculative_tokens": 3,
    }
    assert SpecConfig("none").vllm_config(Path("/m")) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"method": "eagle3"}, "speculative.method"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "speculative.num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": 17}, "speculative.num_speculative_tokens"),
        ({"method": "ngram", "prompt_lookup_min": 0}, "speculative.prompt_lookup_min"),
        (
            {"method": "ngram", "prompt_lookup_min": 4, "prompt_lookup_max": 3},
            "speculative.prompt_lookup_max",
        ),
        ({"method": "ngram", "draft_model": Path("/d")}, "speculative.draft_model"),
    ],
)
def test_bad_spec_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        SpecConfig(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"port": 80}, "port"),
        ({"max_model_len": 8}, "max_model_len"),
        ({"dtype": "int4"}, "dtype"),
        ({"kv_cache_gib": 0}, "kv_cache_gib"),
        ({"startup_timeout": 0}, "startup_timeout"),
    ],
)
def test_bad_server_option_names_the_field(
    kwargs: dict[str, object], field: str, tmp_path: Path
) -> None:
    with pytest.raises(ValidationError) as err:
        VllmServer(paths=lab_paths(tmp_path), **kwargs)  # type: ignore[arg-type]
    assert err.value.field == field
    assert not (tmp_path / "vllm-run").exists()  # nothing written


def test_parse_recorded_metrics() -> None:
    counters = parse_spec_decode_counters(METRICS.read_text())
    assert counters.drafts == 14
    assert counters.draft_tokens == 34
    assert counters.accepted_tokens == 33
    assert counters.accepted_per_position == {0: 14, 1: 10, 2: 9}
    assert sum(counters.accepted_per_position.values()) == counters.accepted_tokens
    assert counters.mean_acceptance_length == pytest.approx(1 + 33 / 14)


def test_counter_delta_and_empty_run() -> None:
    before = SpecDecodeCounters(10, 30, 20, {0: 9, 1: 7, 2: 4})
    after = SpecDecodeCounters(15, 45, 26, {0: 13, 1: 9, 2: 4})
    delta = after.minus(before)
    assert delta == SpecDecodeCounters(5, 15, 6, {0: 4, 1: 2, 2: 0})
    assert SpecDecodeCounters().mean_acceptance_length is None


def test_stale_pidfile_never_signals_a_reused_pid(tmp_path: Path) -> None:
    """A pidfile whose pid now belongs to another program stops nothing."""
    paths = lab_paths(tmp_path)
    paths.run.mkdir(parents=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (paths.run / "vllm-18999.json").write_text(json.dumps({"pid": other.pid, "port": 18999}))
        assert server_status(paths) == [
            {
                "port": 18999,
                "pid": other.pid,
                "running": False,
                "healthy": False,
                "spec": None,
                "log": None,
                "started": None,
            }
        ]
        assert stop_port(paths, 18999, timeout=1) is False
        assert other.poll() is None  # still running: not ours, not signalled
        assert not (paths.run / "vllm-18999.json").exists()  # stale pidfile cleared
    finally:
        other.kill()
        other.wait()


def test_cli_status_and_stop_with_no_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["lab", "vllm", "status", "--cache", str(tmp_path)]) == 0
    assert "no lab vllm servers" in capsys.readouterr().out
    assert main(["lab", "vllm", "status", "--cache", str(tmp_path), "--port", "18998"]) == 1
    assert main(["lab", "vllm", "stop", "--cache", str(tmp_path), "--port", "18998"]) == 0
    assert "no lab server running" in capsys.readouterr().out


def test_cli_start_rejects_bad_spec_before_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["lab", "vllm", "start", "--cache", str(tmp_path), "--spec", "ngram",
         "--prompt-lookup-min", "0"]
    )  # fmt: skip
    assert code == 2
    assert "speculative.prompt_lookup_min: must be >= 1" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_start_without_install_says_what_to_run(tmp_path: Path) -> None:
    server = VllmServer(paths=lab_paths(tmp_path), model=tmp_path / "m")
    with pytest.raises(Exception, match="specops lab vllm install"):
        server.start()
