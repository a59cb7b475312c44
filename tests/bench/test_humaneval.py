"""The HumanEval sandbox runner: canonical solutions pass, wrong and hanging code fail."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specops.bench.humaneval import (
    check_program,
    evaluate,
    load_problems,
    program_for,
    truncate_at_stops,
)


def test_dataset_has_164_problems() -> None:
    problems = load_problems()
    assert len(problems) == 164
    assert problems[0].task_id == "HumanEval/0"


def test_canonical_solutions_pass_subset() -> None:
    problems = load_problems(20)
    verdicts = evaluate(problems, {p.task_id: p.canonical_solution for p in problems})
    assert [v.result for v in verdicts] == ["passed"] * 20


@pytest.mark.slow
def test_all_canonical_solutions_pass() -> None:
    problems = load_problems()
    verdicts = evaluate(problems, {p.task_id: p.canonical_solution for p in problems})
    assert sum(v.passed for v in verdicts) == 164, [v for v in verdicts if not v.passed]


def test_wrong_code_fails_with_the_reason() -> None:
    problem = load_problems(1)[0]  # has_close_elements
    verdict = check_program(problem.task_id, program_for(problem, "    return False\n"))
    assert not verdict.passed
    assert verdict.result.startswith("failed: AssertionError")


def test_syntax_error_fails() -> None:
    problem = load_problems(1)[0]
    verdict = check_program(problem.task_id, program_for(problem, "    return (\n"))
    assert not verdict.passed
    assert "SyntaxError" in verdict.result


# A hang guard (the sleeper asks for an hour), not a speed target: the verdicts below
# say what the runner did.
@pytest.mark.timeout(300)
def test_hanging_code_is_killed_at_the_limit_and_the_run_goes_on() -> None:
    problems = load_problems(3)
    completions = {p.task_id: p.canonical_solution for p in problems}
    completions[problems[0].task_id] = "    while True:\n        pass\n"  # burns CPU
    completions[problems[1].task_id] = "    import time\n    time.sleep(3600)\n"  # sleeps
    verdicts = evaluate(problems, completions, timeout_s=1.0, workers=2)
    assert not verdicts[0].passed
    assert "CPU limit" in verdicts[0].result or "timed out" in verdicts[0].result
    assert verdicts[1].result == "timed out after 1 s"
    assert verdicts[2].passed


def test_memory_and_network_are_limited() -> None:
    mem = check_program("mem", "x = bytearray(3 << 30)\n", memory_mb=256)
    assert mem.result == "failed: MemoryError"
    net = check_program("net", "import socket\nsocket.create_connection(('127.0.0.1', 9))\n")
    assert "network use is disabled" in net.result


def test_missing_completion_fails() -> None:
    problems = load_problems(1)
    assert evaluate(problems, {})[0].result == "no completion"


def test_chat_style_full_function_keeps_prompt_imports() -> None:
    problem = load_problems(1)[0]
    full = problem.prompt + problem.canonical_solution
    verdict = check_program(problem.task_id, program_for(problem, full))
    assert verdict.passed


def test_completion_is_cut_at_the_first_stop_sequence() -> None:
    text = "    return 1\n\n\ndef other():\n    pass\n#x"
    assert truncate_at_stops(text) == "    return 1\n\n"
    assert truncate_at_stops("    return 1\n") == "    return 1\n"


def test_model_code_never_runs_as_root(tmp_path: Path) -> None:
    """The documented workflow runs as root: model-written code must not. It runs as
    nobody (or, for an unprivileged caller, as that caller) and cannot read a root-only
    file."""
    secret = tmp_path / "root-only"
    secret.write_text("x")
    secret.chmod(0o600)
    program = (
        "import os\n"
        "assert os.geteuid() != 0 and os.getegid() != 0 and 0 not in os.getgroups(), "
        "(os.geteuid(), os.getegid(), os.getgroups())\n"
        f"open({str(secret)!r}).read()\n"
    )
    verdict = check_program("T/uid", program)
    if os.geteuid() == 0:
        assert verdict.result.startswith("failed: PermissionError"), verdict.result
    else:  # already unprivileged: it runs as the caller, whose file that is
        assert verdict.passed, verdict.result
    uid_only = program.rsplit("\n", 2)[0] + "\n"
    assert check_program("T/uid-ok", uid_only).passed
