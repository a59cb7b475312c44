"""scripts/experiments/bench-fidelity.py's own logic without a server: the referee's counters from a
recorded vLLM /metrics page, the per-run referee, the analysis of a concurrency's runs
into intervals and verdicts, the argument checks, and where the API key goes (never on
a command line)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from plugins.scripts import load_script

from specops.bench.fidelity import MET, NOT_MET, UNDECIDED, schedule

REPO = Path(__file__).resolve().parents[2]
METRICS = REPO / "tests/fixtures/lab/vllm-0.32-cpu-metrics-ngram.txt"


@pytest.fixture(scope="module")
def p1() -> ModuleType:
    return load_script("experiments/bench-fidelity.py")


def test_parse_metrics_reads_a_recorded_vllm_page(p1: ModuleType) -> None:
    m = p1.parse_metrics(METRICS.read_text())
    assert m["ttft_count"] == 1.0
    assert m["ttft_sum"] == pytest.approx(1.4574580192565918)
    assert m["tpot_count"] == 1.0
    assert m["generated"] == 48.0
    assert m["drafts"] == 14.0
    assert m["accepted"] == 33.0  # not the per-position family


def test_referee_over_one_run(p1: ModuleType) -> None:
    before = p1.parse_metrics(METRICS.read_text())
    after = dict(before)
    after.update(
        ttft_sum=before["ttft_sum"] + 0.2,
        ttft_count=before["ttft_count"] + 4,
        tpot_sum=before["tpot_sum"] + 0.02,
        tpot_count=before["tpot_count"] + 4,
        generated=before["generated"] + 128,
        drafts=before["drafts"] + 40,
        accepted=before["accepted"] + 60,
    )
    r = p1.referee(before, after, 2.0)
    assert r["server_ttft_mean_ms"] == pytest.approx(50.0)
    assert r["server_tpot_mean_ms"] == pytest.approx(5.0)
    assert r["server_gen_tok_s"] == pytest.approx(64.0)
    assert r["server_generated_tokens"] == 128
    assert r["server_requests"] == 4
    assert r["server_acceptance_length"] == pytest.approx(2.5)
    plain = p1.referee({"generated": 10.0}, {"generated": 10.0}, 0.0)
    assert plain["server_ttft_mean_ms"] is None
    assert plain["server_gen_tok_s"] is None
    assert plain["server_acceptance_length"] is None


def test_sampler_window_is_where_the_server_generated(p1: ModuleType) -> None:
    sampler = p1.Sampler(None, 0)
    # (time, client CPU s, server CPU s, server's generated-token counter)
    sampler.samples = [
        (0.0, 1.0, 10.0, 100.0), (0.2, 1.1, 10.1, 100.0),  # client starting up
        (0.4, 1.2, 10.3, 100.0), (0.6, 1.3, 10.7, 140.0), (0.8, 1.4, 11.1, 180.0),
        (1.0, 1.5, 11.5, 220.0), (1.2, 1.6, 11.6, 220.0),  # client exiting
    ]  # fmt: skip
    w = sampler.while_generating()
    assert w["server_window_s"] == pytest.approx(0.6)  # 0.4 (last flat) to 1.0 (last growth)
    assert w["server_window_tok_s"] == pytest.approx(80 / 0.4)  # 0.6 to 1.0: whole intervals
    assert w["client_cores"] == pytest.approx(0.3 / 0.6)
    assert w["server_cores"] == pytest.approx(1.2 / 0.6)
    sampler.samples = sampler.samples[:4]  # the counter grew once: no whole interval
    assert sampler.while_generating()["server_window_tok_s"] is None
    sampler.samples = sampler.samples[:2]
    assert sampler.while_generating()["server_cores"] is None


def _run(client: str, repeat: int, c: int, tpot: float, server_tpot: float) -> dict[str, Any]:
    return {
        "phase": "measured", "client": client, "repeat": repeat, "concurrency": c,
        "requests": 16, "ttft_p50_ms": 20.0, "tpot_p50_ms": tpot, "output_tok_s": 1000 / tpot,
        "acceptance_length": None, "output_tokens": 512, "ttft_mean_ms": 21.0,
        "tpot_mean_ms": tpot, "server_ttft_mean_ms": 20.0, "server_tpot_mean_ms": server_tpot,
        "server_gen_tok_s": 1000 / server_tpot, "server_window_tok_s": 1000 / server_tpot,
        "server_generated_tokens": 512,
        "server_acceptance_length": None,
    }  # fmt: skip


def test_analyse_pairs_runs_and_decides(p1: ModuleType) -> None:
    # TPOT: ours 10 % slower in every pair -> not met; TTFT identical -> met;
    # the server's own TPOT moved with the clients (it, not the client, was slower)
    runs = [
        _run("ours", 0, 4, 5.5, 5.5), _run("theirs", 0, 4, 5.0, 5.0),
        _run("theirs", 1, 4, 5.0, 5.0), _run("ours", 1, 4, 5.51, 5.5),
        _run("ours", 2, 4, 5.49, 5.5), _run("theirs", 2, 4, 5.0, 5.0),
        {**_run("ours", 0, 1, 9.9, 9.9), "phase": "warmup", "repeat": None},
    ]  # fmt: skip
    v = p1.analyse(4, runs, target=0.05, confidence=0.95)
    assert v["pairs"] == 3
    assert v["metrics"]["ttft_p50_ms"]["verdict"] == MET
    tpot = v["metrics"]["tpot_p50_ms"]
    assert tpot["verdict"] == NOT_MET
    assert tpot["ratio"]["point"] == pytest.approx(1.1, rel=1e-3)
    assert tpot["ratio"]["low"] > 1.05
    assert tpot["referee"]["ratio"]["point"] == pytest.approx(1.1)
    assert tpot["referee"]["spread"]["runs"] == 6  # every measured run, warm-up left out
    assert v["metrics"]["output_tok_s"]["verdict"] == NOT_MET
    assert v["verdict"] == NOT_MET
    assert v["acceptance"]["verdict"] == "n/a (no speculation)"
    assert v["agreement"]["ours"]["tpot_mean_vs_server"] == pytest.approx(5.5 / 5.5)
    assert v["agreement"]["theirs"]["foreign_tokens"] == [0, 0, 0]


def test_analyse_noisy_pairs_are_undecided(p1: ModuleType) -> None:
    runs = []
    for r, ratio in enumerate((0.97, 1.06, 1.00)):
        runs += [_run("ours", r, 1, 5.0 * ratio, 5.0), _run("theirs", r, 1, 5.0, 5.0)]
    v = p1.analyse(1, runs, target=0.05, confidence=0.95)
    assert v["metrics"]["tpot_p50_ms"]["verdict"] == UNDECIDED
    assert v["verdict"] == UNDECIDED


def test_analyse_refuses_an_unpaired_run(p1: ModuleType) -> None:
    runs = [_run("ours", 0, 1, 5.0, 5.0), _run("theirs", 0, 1, 5.0, 5.0), _run("ours", 1, 1, 5, 5)]
    with pytest.raises(ValueError, match="runs missing"):
        p1.analyse(1, runs, target=0.05, confidence=0.95)


def test_order_text_reads_abba(p1: ModuleType) -> None:
    assert p1._order_text(schedule([1, 4], 3), 4).startswith("AB BA AB")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repeats", "2"], "--repeats must be >= 3"),
        (["--concurrency", "1,x"], "comma list of integers"),
        (["--context", "2000"], "--context <= 1024"),
        (["--servers", "plain,eagle"], "--servers takes plain and/or ngram"),
        (["--base-url", "http://127.0.0.1:1"], "--tokenizer MODEL_DIR is needed"),
        (["--base-url", "http://a:1", "--tokenizer", "t", "--label", "a", "--label", "b"],
         "2 --label for 1 --base-url"),
    ],
)  # fmt: skip
def test_parse_args_refuses(
    p1: ModuleType, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        p1.parse_args(argv)
    assert message in capsys.readouterr().err


def test_parse_args_defaults(p1: ModuleType) -> None:
    args = p1.parse_args([])
    assert args.repeats == 3
    assert args.concurrency == [1, 4, 16]
    assert args.peer == "worker"
    assert args.servers == ["plain", "ngram"]
    assert p1.parse_args(["--servers", "ngram,plain"]).servers == ["plain", "ngram"]  # plain first


def _args(p1: ModuleType, *argv: str) -> argparse.Namespace:
    args: argparse.Namespace = p1.parse_args(["--tokenizer", "/models/x", *argv])
    return args


def test_api_key_from_a_private_file(p1: ModuleType, tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("sk-test-123\n")
    key.chmod(0o644)
    with pytest.raises(SystemExit) as exc:
        p1.api_key(_args(p1, "--api-key-file", str(key)))
    assert "chmod 0600" in str(exc.value)
    assert "sk-test-123" not in str(exc.value)
    key.chmod(0o600)
    assert p1.api_key(_args(p1, "--api-key-file", str(key))) == "sk-test-123"


def test_api_key_from_the_environment(p1: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("P1_TEST_KEY", "sk-env-9")
    assert p1.api_key(_args(p1, "--api-key-env", "P1_TEST_KEY")) == "sk-env-9"
    monkeypatch.delenv("P1_TEST_KEY")
    with pytest.raises(SystemExit, match="unset or empty"):
        p1.api_key(_args(p1, "--api-key-env", "P1_TEST_KEY"))
    assert p1.api_key(_args(p1)) is None


def test_the_key_reaches_both_clients_but_no_command_line(
    p1: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "stale-key-of-the-caller")
    session = p1.Session(_args(p1), tmp_path, "sk-secret-42")
    ours = session.ours_argv("http://127.0.0.1:8000", 4, 16)
    theirs = session.theirs_argv(
        "http://127.0.0.1:8000", 4, 16, dataset=tmp_path / "d.json", model="m", name="r.json"
    )
    assert not any("sk-secret-42" in arg for arg in (*ours, *theirs))
    assert session.peer_env["OPENAI_API_KEY"] == "sk-secret-42"  # vLLM's request functions
    plan = tmp_path / "ours-plan.json"
    assert ours[ours.index("--plan") + 1] == str(plan)
    assert "sk-secret-42" not in plan.read_text()
    assert session.ours_env[p1._OURS_KEY_ENV] == "sk-secret-42"
    assert f'"api_key_env": "{p1._OURS_KEY_ENV}"' in plan.read_text()
    # the clients' own warm-ups are off: the protocol's warm-up runs instead
    assert ours[ours.index("--warmup-per-cell") + 1] == "0"
    assert theirs[theirs.index("--num-warmups") + 1] == "0"
    assert theirs[theirs.index("--ready-check-timeout-sec") + 1] == "0"
    keyless = p1.Session(_args(p1), tmp_path, None)
    assert "OPENAI_API_KEY" not in keyless.peer_env  # the caller's key is not sent unasked
    assert "--plan" not in keyless.ours_argv("http://127.0.0.1:8000", 1, 4)
