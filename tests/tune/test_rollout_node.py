"""The rollout's per-node verdict (the collection's module_utils rollout_node) and its filters.

The cases are the rescue's paths as the role meets them: a start that never got ready
(undone by service_unit itself), the output gate, the smoke gate (with and without its
JSON verdict), the re-enable hook, a restore that failed too; and the record of a node
that changed, was already on the profile, or was restored. The real playbook runs them
in tests/tune/test_real_rollout.py (marker fleet).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.filter.rollout import (
    FilterModule,
    rollout_failure,
    rollout_record,
    rollout_restore,
    rollout_resume,
)
from ansible_collections.specops.infra.plugins.module_utils import rollout_node as rn
from jinja2 import Environment

REPO = Path(__file__).resolve().parents[2]

SMOKE_FAILED = {
    "failed": True,
    "rc": 1,
    "msg": "non-zero return code",
    "stdout": json.dumps({"ok": False, "message": "throughput dropped 31% in C=2", "seconds": 7.5}),
}
SMOKE_OK = {
    "failed": False,
    "rc": 0,
    "stdout": json.dumps({"ok": True, "message": "smoke ok", "seconds": 6.25, "results": "r.json"}),
}
CHANGE = {
    "changed": True,
    "restarted": True,
    "stop_seconds": 1.5,
    "start_to_healthy_seconds": 12.0,
    "ready_seconds": 0.75,
    "output_gate": {"ok": True, "seconds": 2.0},
    "after": {"InvocationID": "new"},
}
PROBE = {"before": {"InvocationID": "old"}}


def test_start_that_never_got_ready_is_restart_readiness_and_already_restored() -> None:
    failed = {"failed": True, "msg": "not ready after 900 s", "restored": True, "after": {"x": 1}}
    f = rn.failure(failed, change=None, smoke=None)
    assert (f.gate, f.message, f.restore_needed) == ("restart-readiness", failed["msg"], False)
    assert f.change == failed  # the record reads the failed step's times and identity


def test_output_gate_is_named_from_the_failed_step() -> None:
    failed = {"msg": "output differs", "output_gate": {"ok": False, "seconds": 3.0}}
    assert rn.failure(failed, change=None, smoke=None).gate == "output-gate"
    # output_gate null or without a verdict: the start itself failed
    for gate in (None, {}, {"ok": None}):
        assert rn.failure({"output_gate": gate}, change=None, smoke=None).gate == (
            "restart-readiness"
        )


def test_plain_baseline_phase_is_its_own_gate() -> None:
    """The node's plain baseline measured in the rollout: a plain server that never got
    ready was undone by service_unit; a failed measurement leaves the node on no
    speculation, so the previous unit has to be put back."""
    never_ready = {"msg": "not ready after 900 s", "restored": True}
    f = rn.failure(never_ready, change=None, smoke=None, plain=None, plain_needed=True)
    assert (f.gate, f.message, f.restore_needed) == ("plain-baseline", never_ready["msg"], False)
    measured = {"failed": True, "rc": 2, "msg": "non-zero return code",
                "stdout": json.dumps({"message": "the server speculated"})}  # fmt: skip
    f = rn.failure(measured, change=None, smoke=None, plain=measured, plain_needed=True)
    assert (f.gate, f.message, f.restore_needed) == (
        "plain-baseline", "the server speculated", True,
    )  # fmt: skip
    # the plain phase passed (or was not needed): the new profile's start is named
    ok = {"rc": 0, "stdout": json.dumps({"stands": True, "measured": True, "seconds": 9.0})}
    for plain, needed in ((ok, True), (None, False)):
        f = rn.failure(never_ready, change=None, smoke=None, plain=plain, plain_needed=needed)
        assert f.gate == "restart-readiness"
    assert rollout_failure(never_ready, plain=None, plain_needed=True)["gate"] == "plain-baseline"
    rec = _record(outcome="changed", message="m", change=CHANGE, smoke=SMOKE_OK, plain=ok)
    assert (rec["plain_s"], rec["against_plain"]) == (9.0, None)
    # switched to no speculation for it: the switch's stop, start and gate count too
    rec = _record(outcome="changed", message="m", change=CHANGE, smoke=SMOKE_OK, plain=ok,
                  plain_change=CHANGE)  # fmt: skip
    assert rec["plain_s"] == 9.0 + 1.5 + 12.0 + 0.75 + 2.0


def test_smoke_gate_keeps_the_gates_own_message() -> None:
    f = rn.failure(SMOKE_FAILED, change=CHANGE, smoke=SMOKE_FAILED)
    assert (f.gate, f.message, f.restore_needed) == (
        "smoke-benchmark",
        "throughput dropped 31% in C=2",
        True,
    )
    assert f.change == CHANGE


@pytest.mark.parametrize("stdout", ["", "Traceback (most recent call last): ...", "{not json"])
def test_crashed_smoke_step_keeps_the_task_message(stdout: str) -> None:
    smoke = {"failed": True, "msg": "non-zero return code", "stdout": stdout}
    f = rn.failure(smoke, change=CHANGE, smoke=smoke)
    assert (f.gate, f.message) == ("smoke-benchmark", "non-zero return code")


def test_a_failure_after_the_smoke_gate_is_the_re_enable_hook() -> None:
    f = rn.failure({"msg": "haproxy refused"}, change=CHANGE, smoke=SMOKE_OK)
    assert (f.gate, f.message) == ("re-enable", "haproxy refused")
    assert rn.failure({}, change=CHANGE, smoke=SMOKE_OK).message == "failed"


@pytest.mark.parametrize("length", [10, 595, 600, 605, 606, 700, 2000])
def test_truncate_is_jinjas(length: int) -> None:
    env = Environment(autoescape=True)  # the text has no markup: same output
    text = " ".join(f"w{i:03d}" for i in range(length))[:length]
    jinja = env.from_string("{{ t | truncate(600) }}").render(t=text)
    assert rn.truncate(text, 600) == jinja
    assert rn.failure({"msg": text}, change=CHANGE, smoke=SMOKE_OK).message == jinja


def test_restore_skipped_keeps_the_failed_steps_identity() -> None:
    failed = {"msg": "not ready", "restored": True, "after": {"InvocationID": "prev"}}
    f = rn.failure(failed, change=None, smoke=None).to_dict()
    r = rn.restore({"skipped": True, "changed": False}, node="n1", failure=f, record_path="/r/n1")
    assert (r.ok, r.outcome, r.message) == (True, "restored", "not ready")
    assert r.restored == failed
    assert r.stop_message == (
        "rollout stopped at n1: gate 'restart-readiness' failed: not ready. n1 runs its"
        " previous unit again and answers; the nodes after it were not touched."
        " Record: /r/n1"
    )


def test_restore_that_failed_too_needs_an_operator() -> None:
    f = rn.failure(SMOKE_FAILED, change=CHANGE, smoke=SMOKE_FAILED).to_dict()
    res = {"ready": False, "msg": "previous server not ready: " + "x " * 400}
    r = rn.restore(res, node="n1", failure=f, record_path="/r/n1")
    assert (r.ok, r.outcome) == (False, "restore-failed")
    assert r.message.startswith(
        "throughput dropped 31% in C=2; restoring the previous unit failed too: previous"
    )
    assert r.message.endswith("...")
    assert "could NOT be restored" in r.stop_message
    assert "it needs an operator" in r.stop_message
    assert r.restored == res


def test_restore_ready_is_restored() -> None:
    f = rn.failure(SMOKE_FAILED, change=CHANGE, smoke=SMOKE_FAILED).to_dict()
    res = {"ready": True, "after": {"InvocationID": "prev"}}
    assert rn.restore(res, node="n", failure=f, record_path="p").outcome == "restored"


def _record(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "profile": {"method": "ngram", "num_draft_tokens": 6},
        "previous_profile": {"method": "ngram", "num_draft_tokens": 4},
        "started_at": "2026-01-01T00:00:00+00:00",
        "t0": "1000.0",
        "probe": PROBE,
        "now": 1012.345,
    }
    return rn.node_record("n1", **{**base, **kw})


def test_record_of_a_changed_node() -> None:
    baseline = {"changed": True, "stdout": json.dumps({"measured": True, "seconds": 20.0})}
    rec = _record(
        outcome="changed", message="smoke ok", change=CHANGE, baseline=baseline, smoke=SMOKE_OK
    )
    assert rec == {
        "node": "n1",
        "outcome": "changed",
        "failed_gate": None,
        "message": "smoke ok",
        "profile": {"method": "ngram", "num_draft_tokens": 6},
        "previous_profile": {"method": "ngram", "num_draft_tokens": 4},
        "started_at": "2026-01-01T00:00:00+00:00",
        "rollout_s": 12.35,
        "restarted": True,
        "engine_stop_s": 1.5,
        "engine_start_to_healthy_s": 12.0,
        "ready_s": 0.75,
        "output_gate_s": 2.0,
        "baseline_s": 20.0,
        "plain_s": 0.0,
        "plain_baseline": None,
        "against_plain": None,
        "smoke_s": 6.25,
        "smoke_results": "r.json",
        "service_before": {"InvocationID": "old"},
        "service_after": {"InvocationID": "new"},
    }


def test_record_of_a_node_already_on_the_profile() -> None:
    # Written in the preflight: no baseline, change, smoke or rescue yet.
    rec = _record(outcome="already-on-profile", message="not restarted")
    assert rec["failed_gate"] is None
    assert (rec["restarted"], rec["engine_stop_s"], rec["output_gate_s"]) == (False, None, None)
    assert (rec["baseline_s"], rec["smoke_s"], rec["smoke_results"]) == (0, 0, None)
    assert rec["service_after"] == rec["service_before"] == {"InvocationID": "old"}


def test_record_of_a_restored_node() -> None:
    failed = {"msg": "not ready", "restored": True, "restarted": True, "stop_seconds": 2.0,
              "output_gate": None, "after": {"InvocationID": "prev"}}  # fmt: skip
    f = rn.failure(failed, change=None, smoke=None).to_dict()
    r = rn.restore({"skipped": True}, node="n1", failure=f, record_path="p").to_dict()
    skipped_baseline = {"skipped": True, "changed": False}
    rec = _record(
        outcome=r["outcome"], message=r["message"], failure=f, restore=r, baseline=skipped_baseline
    )
    assert (rec["outcome"], rec["failed_gate"], rec["message"]) == (
        "restored",
        "restart-readiness",
        "not ready",
    )
    assert (rec["restarted"], rec["engine_stop_s"], rec["output_gate_s"]) == (True, 2.0, None)
    assert rec["baseline_s"] == 0
    assert rec["service_after"] == {"InvocationID": "prev"}


def test_record_rejects_an_unknown_outcome() -> None:
    with pytest.raises(ValueError, match="outcome: must be one of changed"):
        _record(outcome="done", message="")
    with pytest.raises(AnsibleFilterError, match="rollout_record: outcome"):
        rollout_record("n1", outcome="done", message="", profile=None, previous_profile=None,
                       started_at="", t0=0, probe=PROBE)  # fmt: skip


def test_filters_are_the_packages_functions() -> None:
    assert set(FilterModule().filters()) == {
        "rollout_failure",
        "rollout_restore",
        "rollout_record",
        "rollout_resume",
    }
    f = rollout_failure(SMOKE_FAILED, change=CHANGE, smoke=SMOKE_FAILED)
    assert f == rn.failure(SMOKE_FAILED, change=CHANGE, smoke=SMOKE_FAILED).to_dict()
    r = rollout_restore({"skipped": True}, "n1", f, "p")
    assert r["outcome"] == "restored"
    with pytest.raises(AnsibleFilterError, match="rollout_failure's result"):
        rollout_restore({"skipped": True}, "n1", {}, "p")


def test_the_filters_under_ansible(tmp_path: Path) -> None:
    out = tmp_path / "verdict.json"
    # The filters are the collection's alone: no PYTHONPATH to the controller package.
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
           "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}  # fmt: skip
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c",
         "local", "-e", f"out={out}", "-e", f"ansible_python_interpreter={sys.executable}",
         str(REPO / "tests/fixtures/tune/rollout-node-filters.yml")],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    got = json.loads(out.read_text())
    assert got["failure"]["gate"] == "smoke-benchmark"
    assert got["failure"]["message"] == "throughput dropped 31%"
    assert got["verdict"]["outcome"] == "restored"
    assert got["verdict"]["stop_message"].startswith(
        "rollout stopped at localhost: gate 'smoke-benchmark' failed: throughput dropped 31%."
    )
    rec = got["record"]
    assert (rec["failed_gate"], rec["restarted"], rec["engine_stop_s"]) == (
        "smoke-benchmark",
        True,
        2.5,
    )
    assert (rec["smoke_s"], rec["baseline_s"]) == (1.5, 0)
    # the restore step was skipped: the identity after is the change's
    assert rec["service_after"] == {"InvocationID": "new"}
    assert 0 <= rec["rollout_s"] < 3600


# rollout_node.resume: a node already on the new unit (issue 31: a rollout killed after
# it wrote the unit and before the gates passed).
NEW = {"method": "ngram", "num_draft_tokens": 6}
OLD_UNIT = "# speculative profile: null\nExecStart=/srv/vllm serve\n"
NEW_UNIT = '# speculative profile: {"method": "ngram"}\nExecStart=/srv/vllm serve --spec\n'


def _probe(**kw: Any) -> dict[str, Any]:
    return {"written": False, "restarted": False, "ready": True, "text_before": NEW_UNIT, **kw}


def _rec(outcome: str, profile: dict[str, Any]) -> str:
    return json.dumps({"outcome": outcome, "profile": profile})


@pytest.mark.parametrize("outcome", ["changed", "already-on-profile"])
def test_a_node_recorded_as_passing_this_profile_is_done(outcome: str) -> None:
    got = rn.resume(_probe(), profile=NEW, record_text=_rec(outcome, NEW),
                    kept_previous=OLD_UNIT, record_path="r.json")  # fmt: skip
    assert got == rn.Resume(True, NEW_UNIT, "")


@pytest.mark.parametrize(
    "record",
    [None, "", "{not json", "[]", _rec("restored", NEW), _rec("changed", {"method": "none"})],
)
def test_a_node_on_the_new_unit_without_a_passing_record_is_gated_with_the_kept_unit(
    record: str | None,
) -> None:
    got = rn.resume(_probe(), profile=NEW, record_text=record, kept_previous=OLD_UNIT,
                    record_path="nodes/n1.json")  # fmt: skip
    assert not got.done
    assert got.previous_text == OLD_UNIT  # what a failure puts back: not the new unit
    assert "no record at nodes/n1.json says it passed this profile's gates" in got.message
    assert "the unit it ran before (kept beside it as .previous)" in got.message
    # ... with no kept unit (or one equal to the current), the current one is all there is
    for kept in (None, NEW_UNIT):
        alone = rn.resume(_probe(), profile=NEW, record_text=record, kept_previous=kept,
                          record_path="r")  # fmt: skip
        assert (alone.done, alone.previous_text) == (False, NEW_UNIT)
        assert "its current unit (no earlier one is kept)" in alone.message


def test_a_node_to_change_or_not_answering_is_not_done_and_keeps_its_unit() -> None:
    for probe in (_probe(written=True, text_before=OLD_UNIT), _probe(restarted=True)):
        got = rn.resume(probe, profile=NEW, record_text=_rec("changed", NEW),
                        kept_previous="# older", record_path="r")  # fmt: skip
        assert got == rn.Resume(False, probe["text_before"], "")
    down = rn.resume(_probe(ready=False), profile=NEW, record_text=_rec("changed", NEW),
                     kept_previous=OLD_UNIT, record_path="r")  # fmt: skip
    assert down == rn.Resume(False, NEW_UNIT, "")


@pytest.mark.parametrize("record", [_rec("changed", NEW), None])
def test_a_server_started_before_its_unit_was_written_is_restarted_and_gated(
    record: str | None,
) -> None:
    """A run stopped between writing the unit and restarting left the old process
    under the new text: even a node recorded as passing this profile is not done."""
    stale = _probe(restarted=True, stale=True)
    got = rn.resume(stale, profile=NEW, record_text=record, kept_previous=OLD_UNIT,
                    record_path="r")  # fmt: skip
    assert (got.done, got.previous_text) == (False, OLD_UNIT)
    assert "its server started before that unit was written" in got.message
    assert "puts back the unit it ran before" in got.message


def test_the_resume_filter_adapts_bad_input() -> None:
    assert rollout_resume(_probe(), NEW, "", "", "r")["done"] is False
    assert FilterModule().filters()["rollout_resume"] is rollout_resume
    with pytest.raises(AnsibleFilterError, match="rollout_resume: the probe and the profile"):
        rollout_resume("nope", NEW)  # type: ignore[arg-type]
