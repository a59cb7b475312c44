"""The runner against the synthetic SSE server on 127.0.0.1: matrix, faults, CLI."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import pytest
from bench_consistency import assert_report_consistent
from plugins.terminal import python_module_argv

from specops.bench.plan import plan_from_mapping
from specops.bench.prompts import PromptBuilder, ServerTokenizer, load_corpus
from specops.bench.report import write_report
from specops.bench.results import load_results
from specops.bench.runner import new_run_id, run_plan
from specops.cli import main
from specops.errors import SpecopsError


def _plan(url: str, **kw: object):
    data: dict = {
        "base_url": url,
        "concurrency": [1, 4],
        "context_lengths": [64, 300],
        "output_len": 24,
        "requests_per_cell": 6,
        "waves_per_cell": 0,  # exactly requests_per_cell (the waves rule has its own test)
        "warmup_per_cell": 1,
        "warmup_waves": 0,  # the matrix warm-up has its own test
    }
    data.update(kw)
    return plan_from_mapping(data)


def test_matrix_report_consistent_with_records(synthetic, tmp_path: Path) -> None:
    server = synthetic(tokens_per_chunk=3, chunk_delay_s=0.002)
    results = asyncio.run(run_plan(_plan(server.url, slo={"ttft_ms": 1000})))
    assert [(c.concurrency, c.context_tokens) for c in results.cells] == [
        (1, 64),
        (4, 64),
        (1, 300),
        (4, 300),
    ]
    for cell in results.cells:
        assert cell.status == "ok"
        assert cell.warmup_requests == 1
        assert all(r.prompt_tokens == cell.context_tokens for r in cell.records)
        assert all(r.output_tokens == 24 for r in cell.records)
        # 24 tokens in chunks of 3: 7 drafts accepting 2 of 4, acceptance length 3
        assert cell.acceptance.mean_acceptance_length == pytest.approx(3.0)
        assert cell.acceptance.drafts == 6 * 8
    path = results.save(tmp_path / "results.json")
    report = write_report(load_results(path), tmp_path)
    assert_report_consistent(path, report)
    for name in ("throughput.png", "ttft.png", "itl.png", "acceptance.png", "cells.csv"):
        assert (tmp_path / name).stat().st_size > 0


def test_context_clipped_to_max_model_len(synthetic) -> None:
    server = synthetic(max_model_len=200)
    plan = _plan(server.url, concurrency=[1], context_lengths=[64, 1024], context_over_limit="clip")
    results = asyncio.run(run_plan(plan))
    assert [c.context_tokens for c in results.cells] == [64, 176]
    assert "clipped to 176" in results.notes[0]


def test_server_dying_mid_stream_marks_cell_and_run_goes_on(synthetic) -> None:
    server = synthetic(die_after_chunks=2)
    results = asyncio.run(run_plan(_plan(server.url, concurrency=[2], context_lengths=[64, 100])))
    assert len(results.cells) == 2
    for cell in results.cells:
        assert cell.status == "failed"
        assert cell.stats.failed == 6
        (reason,) = cell.stats.failure_reasons
        assert reason.startswith("truncated stream")


def test_server_crash_mid_cell(synthetic) -> None:
    # 1 warm-up + 3 measured requests succeed, then the process "dies"
    server = synthetic(exit_after_requests=4)
    results = asyncio.run(run_plan(_plan(server.url, concurrency=[1], context_lengths=[64, 100])))
    first, second = results.cells
    assert first.status == "partial"
    assert first.stats.completed == 3
    assert second.status == "failed"
    assert all(r.error and "ConnectError" in r.error for r in second.records)
    assert all(reason.startswith("connection error: ") for reason in first.stats.failure_reasons)


def test_fail_fast_stops_after_the_failing_cell(synthetic) -> None:
    server = synthetic(status=503)
    results = asyncio.run(run_plan(_plan(server.url), fail_fast=True))
    assert len(results.cells) == 1
    assert results.cells[0].stats.failure_reasons == {
        'HTTP 503: {"error": {"message": "synthetic fault"}}': 6
    }
    assert "--fail-fast" in results.notes[-1]


def test_no_usage_is_reported(synthetic) -> None:
    server = synthetic(no_usage=True)
    results = asyncio.run(run_plan(_plan(server.url, concurrency=[1], context_lengths=[64])))
    (cell,) = results.cells
    assert cell.status == "failed"
    assert list(cell.stats.failure_reasons) == [
        "server sent no usage (stream_options.include_usage ignored?)"
    ]
    assert cell.stats.total_output_tokens == 0


def test_sglang_generate_acceptance_from_meta_info(synthetic) -> None:
    server = synthetic(tokens_per_chunk=4)
    plan = _plan(server.url, api="sglang-generate", concurrency=[2], context_lengths=[64])
    (cell,) = asyncio.run(run_plan(plan)).cells
    assert cell.status == "ok"
    # the synthetic /version looks like vLLM, so meta_info wins over counters
    assert cell.acceptance.source == "sglang-meta_info"
    assert cell.acceptance.mean_acceptance_length == pytest.approx(4.0)
    assert cell.acceptance.per_position == pytest.approx([1.0, 1.0, 1.0, 0.0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(120)  # a hang guard, not a speed target
def test_unreachable_server_fails_naming_the_url() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(SpecopsError, match=f"cannot reach {url}/v1/models"):
        asyncio.run(run_plan(_plan(url)))


def test_prompts_are_exact_distinct_and_deterministic(synthetic) -> None:
    server = synthetic()

    async def go() -> list[str]:
        import httpx  # noqa: PLC0415

        async with httpx.AsyncClient(base_url=server.url) as client:
            tok = ServerTokenizer(client, "synthetic")
            out = []
            for seed in (0, 0, 1):
                builder = PromptBuilder(tok, "completions", load_corpus("mixed"), seed)
                for key in ("a", "b"):
                    p = await builder.build(key, 500)
                    assert p.tokens == 500
                    assert len(p.text.encode()) == 500
                    out.append(p.text)
            chat = PromptBuilder(tok, "chat", load_corpus("coding"), 0)
            p = await chat.build("a", 300)
            assert p.tokens == 300
            assert len(p.text.encode()) == 290  # 10 template tokens
            return out

    texts = asyncio.run(go())
    assert texts[0:2] == texts[2:4]  # same seed, same prompts
    assert len(set(texts[0:2] + texts[4:6])) == 4
    assert texts[0][:40] != texts[1][:40]  # distinct from the first tokens: no shared prefix


def test_cli_json_mode_report_and_compare(synthetic, tmp_path: Path, capsys) -> None:
    server = synthetic(tokens_per_chunk=2)
    args = [
        "bench",
        "run",
        "--base-url",
        server.url,
        "--concurrency",
        "1,2",
        "--context-lengths",
        "64",
        "--output-len",
        "16",
        "--requests-per-cell",
        "4",
        "--out",
        str(tmp_path),
        "--json",
    ]
    assert main(args) == 0
    line = capsys.readouterr().out.strip()
    info = json.loads(line)
    assert info["failed_cells"] == []
    path = Path(info["results"])
    assert path.is_file()
    assert_report_consistent(path, Path(info["report"]))
    assert (
        main(
            [
                "bench",
                "report",
                str(path),
                "--out",
                str(tmp_path / "r"),
                "--gpu-bandwidth-gbs",
                "100",
                "--model-bytes-per-token",
                "1e9",
            ]
        )
        == 0
    )
    text = (tmp_path / "r" / "report.md").read_text()
    assert "## Roofline (single stream)" in text
    capsys.readouterr()
    assert main(["bench", "compare", str(path), str(path)]) == 0
    assert "0 regression(s)" in capsys.readouterr().out

    slow = synthetic(tokens_per_chunk=1, chunk_delay_s=0.01)
    args[3] = slow.url
    assert main(args) == 0
    other = Path(json.loads(capsys.readouterr().out.strip())["results"])
    assert main(["bench", "compare", str(path), str(other)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out
    assert "output_tok_s" in out


def test_cli_errors_are_one_line(capsys, tmp_path: Path) -> None:
    assert main(["bench", "run", "--base-url", "ftp://x", "--json"]) == 2
    assert capsys.readouterr().err.strip() == (
        "specops bench run: error: base_url: must be an http(s) URL like http://127.0.0.1:8000 "
        "(got 'ftp://x')"
    )
    url = f"http://127.0.0.1:{_free_port()}"
    assert main(["bench", "run", "--base-url", url, "--json"]) == 2
    assert f"cannot reach {url}/v1/models" in capsys.readouterr().err
    bad = tmp_path / "r.json"
    bad.write_text('{"schema_version": 99}')
    assert main(["bench", "report", str(bad)]) == 2
    assert "schema_version: results schema 99 is not supported" in capsys.readouterr().err


def test_a_c64_cell_reaches_64_in_flight_and_holds_it_for_its_waves(synthetic) -> None:
    """Counts, not timings: the cell sends 4 x 64 requests and 64 are in flight at once."""
    server = synthetic(tokens_per_chunk=1, chunk_delay_s=0.005)
    plan = _plan(
        server.url,
        concurrency=[64],
        context_lengths=[32],
        output_len=12,
        requests_per_cell=8,
        waves_per_cell=4,
        warmup_per_cell=0,
    )
    assert plan.requests_for(64) == 256
    assert plan.requests_for(1) == 8  # requests_per_cell stays the floor
    (cell,) = asyncio.run(run_plan(plan)).cells
    assert cell.status == "ok"
    assert cell.stats.requests == 256
    assert cell.stats.concurrency_max == 64
    seen = [r.in_flight_at_send for r in cell.records]
    assert max(s or 0 for s in seen) == 64
    assert all(s is not None and 1 <= s <= 64 for s in seen)
    assert cell.stats.steady_s is not None
    assert cell.stats.steady_output_tok_s is not None
    assert cell.stats.concurrency_mean is not None
    assert 0 < cell.stats.concurrency_mean <= 64


def _cli_args(url: str, out: Path) -> list[str]:
    return [
        "bench", "run", "--base-url", url, "--concurrency", "1,2", "--context-lengths",
        "64,96,128", "--output-len", "8", "--requests-per-cell", "3", "--warmup-per-cell",
        "0", "--out", str(out), "--json", "--no-report",
    ]  # fmt: skip


def test_ctrl_c_keeps_finished_cells_and_resume_completes_the_run(
    synthetic, tmp_path: Path, capsys
) -> None:
    """A real SIGINT to a real CLI process mid-matrix, then --resume in this one."""
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import time  # noqa: PLC0415

    server = synthetic(tokens_per_chunk=1, chunk_delay_s=0.02)  # ~0.16 s per request
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        python_module_argv("specops.cli", *_cli_args(server.url, out)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    cells_file = None
    while proc.poll() is None:
        found = list(out.glob("*/cells.jsonl"))
        if found and found[0].read_text().count("\n") >= 2:
            cells_file = found[0]
            proc.send_signal(signal.SIGINT)
            break
        time.sleep(0.02)
    _, err = proc.communicate(timeout=60)
    assert cells_file is not None, f"the run ended before it could be interrupted: {err}"
    assert proc.returncode == 130, err
    run_dir = cells_file.parent
    assert f"--resume {run_dir}" in err
    interrupted = load_results(run_dir / "results.json")
    assert interrupted.interrupted
    kept = {(c.concurrency, c.context_tokens): c for c in interrupted.cells}
    assert 2 <= len(kept) < 6
    assert "interrupted after" in interrupted.notes[-1]

    assert main(["bench", "run", "--resume", str(run_dir), "--json", "--no-report"]) == 0
    info = json.loads(capsys.readouterr().out.strip())
    assert info["run_id"] == run_dir.name
    done = load_results(run_dir / "results.json")
    assert not done.interrupted
    assert len(done.resumed_at) == 1
    assert [(c.concurrency, c.context_tokens) for c in done.cells] == [
        (1, 64), (2, 64), (1, 96), (2, 96), (1, 128), (2, 128)
    ]  # fmt: skip
    for cell in done.cells:
        assert cell.status == "ok"
        before = kept.get((cell.concurrency, cell.context_tokens))
        if before is not None:  # kept as measured, not measured again
            assert cell.to_dict() == before.to_dict()
    assert (run_dir / "progress.log").read_text().count("cells ") >= 6


def test_resume_refuses_flags_another_plan_or_another_server(synthetic, tmp_path: Path) -> None:
    from specops.bench.results import RunStore  # noqa: PLC0415

    server = synthetic()
    store = RunStore(tmp_path / "run-1")
    plan = _plan(server.url, concurrency=[1], context_lengths=[64])
    asyncio.run(run_plan(plan, store=store))
    assert store.load().cells
    with pytest.raises(SpecopsError, match=r"^resume: .* another plan \(changed: output_len\)"):
        asyncio.run(run_plan(_plan(server.url, concurrency=[1], context_lengths=[64],
                                   output_len=5), store=store))  # fmt: skip
    server.stop()
    synthetic(port=server.port, version="synthetic-2")  # upgraded in place
    with pytest.raises(
        SpecopsError, match=r"^resume: the server changed .*engine_version: 'synthetic-1' -> "
    ):
        asyncio.run(run_plan(plan, store=store))
    assert main(["bench", "run", "--resume", str(store.dir), "--concurrency", "4"]) == 2


def test_a_cut_short_last_cell_line_is_measured_again(synthetic, tmp_path: Path) -> None:
    from specops.bench.results import RunStore  # noqa: PLC0415

    server = synthetic()
    store = RunStore(tmp_path / "run-2")
    plan = _plan(server.url, concurrency=[1, 2], context_lengths=[64])
    first = asyncio.run(run_plan(plan, store=store))
    lines = store.cells_path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 2
    store.cells_path.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2])  # killed mid-write
    assert [c.concurrency for c in store.load().cells] == [1]
    again = asyncio.run(run_plan(plan, store=store))
    assert again.cells[0].to_dict() == first.cells[0].to_dict()
    assert again.cells[1].started_at >= first.cells[1].started_at
    assert len(store.cells_path.read_bytes().splitlines()) == 2


def test_report_shows_the_roofline_of_the_plan_or_why_not(synthetic, tmp_path: Path) -> None:
    server = synthetic(tokens_per_chunk=2, chunk_delay_s=0.002)
    roof = {"gpu": "rtx-pro-6000", "gpu_count": 1, "bytes_per_token": 2.0e9,
            "bytes_source": "inventory"}  # fmt: skip
    plan = _plan(server.url, concurrency=[1, 2], context_lengths=[64], roofline=roof)
    path = asyncio.run(run_plan(plan)).save(tmp_path / "a" / "results.json")
    text = write_report(load_results(path), tmp_path / "a").read_text()
    section = text.split("## Roofline (single stream)", 1)[1]
    assert "Blackwell Workstation Edition: 1 card(s) per replica of the container's 1" in section
    assert "1792 GB/s (1 x 1792 GB/s (NVIDIA RTX PRO 6000" in section
    # bound = 1792e9 / 2e9 = 896 tok/s x acceptance length 2 (2-token chunks)
    row = next(line for line in section.splitlines() if line.startswith("| 64 |"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    assert cols[3:5] == ["896.0", "1792.0"]
    bare = asyncio.run(run_plan(_plan(server.url, concurrency=[1], context_lengths=[64])))
    other = bare.save(tmp_path / "b" / "results.json")
    text = write_report(load_results(other), tmp_path / "b").read_text()
    assert "No roofline: no roofline inputs in the plan" in text


def test_cli_roofline_gpu_replaces_the_plan_cards_and_keeps_its_weights(
    synthetic, tmp_path: Path, capsys
) -> None:
    """A migrated container: the plan written on the source names its old card."""
    server = synthetic(chunk_delay_s=0.002)
    plan = tmp_path / "plan.yml"
    plan.write_text(json.dumps({"concurrency": [1], "context_lengths": [32], "output_len": 8,
                                "requests_per_cell": 2, "warmup_per_cell": 0, "roofline": {
                                    "gpu": "rtx-pro-6000", "gpu_count": 1,
                                    "weights": {"bytes_per_token": 1e9}}}))  # fmt: skip
    args = ["bench", "run", "--plan", str(plan), "--base-url", server.url, "--out",
            str(tmp_path / "r"), "--json", "--roofline-gpu", "NVIDIA RTX A6000",
            "--roofline-gpu-count", "2"]  # fmt: skip
    assert main(args) == 0
    info = json.loads(capsys.readouterr().out)
    recorded = load_results(info["results"]).plan["roofline"]
    assert (recorded["gpu"], recorded["gpu_count"]) == ("NVIDIA RTX A6000", 2)
    assert recorded["weights"] == {"bytes_per_token": 1e9}
    assert (
        "NVIDIA RTX A6000: 1 card(s) per replica of the container's 2"
        in Path(info["report"]).read_text()
    )


def test_run_ids_sort_in_the_order_they_were_made() -> None:
    # Many ids within one second: --reuse reads the newest run first by its id.
    made = []
    for _ in range(40):
        made.append(new_run_id())
        time.sleep(0.002)
    assert sorted(made) == made
    assert len(set(made)) == len(made)
