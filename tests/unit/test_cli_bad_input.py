"""Bad input to every ``specops`` command (issue 36): one line, exit 2, nothing made.

Each row is a command line a new user could type, with the files it names. The run is
in-process (``specops.cli.main``, as the other CLI tests) and asserts: exit 2, nothing
on standard output, exactly one line on standard error that starts with the command
(``specops sweep plan: error: ``) and names the argument or key path at fault
(``objective.z: ``) and, where the row says, what would be valid; no traceback; and the
directory holding every input and output path byte for byte as before (no run
directory, no half-written file). Servers are 127.0.0.1 on a port nothing listens on.
``specops lab`` (the test lab's own tooling) is not covered here.
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from specops import cli

# A sweep config that `sweep plan` accepts against INVENTORY (the control test proves
# it), so each row changes one thing.
NGRAM = {"method": "ngram", "num_draft_tokens": 4}
SWEEP: dict[str, Any] = {
    "canary": "ct1",
    "inventory": "{t}/hosts.ini",
    "base_url": "http://127.0.0.1:18801",
    "base_profile": NGRAM,
    "space": {"num_draft_tokens": "2..5"},
}
INVENTORY = "[serving]\nct1\nct2-qwen\n\n[pve_nodes]\npve1\n"
SPEC = {
    "vmid": 101, "target": "pve-b", "api": {"host": "127.0.0.1", "port": "{port}"},
    "state_dir": "{t}/out/state",  # were anything recorded, the tree check would see it
}  # fmt: skip

# Files every row finds in its directory ({t}); a row adds its own.
COMMON = {
    "a-file": "just text\n",
    "a-dir/": "",
    "bad.yml": "concurrency: [1, 2\noutput_len: 8\n",
    "bad.json": '{"a": 1,\n',
    "list.yml": "- 1\n- 2\n",
    "hosts.ini": INVENTORY,
    "profile.yml": "method: ngram\nnum_draft_tokens: 4\n",
    "results.json": '{"schema_version": 99}\n',
    "out/": "",
    "binary.yml": "\udcff\udcfe\x00",  # written as the bytes ff fe 00: not UTF-8
}


def sweep(**changes: Any) -> str:
    """The sweep config with ``changes`` (a None value drops the key)."""
    data = {**SWEEP, **changes}
    return yaml.safe_dump({k: v for k, v in data.items() if v is not None}, sort_keys=False)


def spec(**changes: Any) -> str:
    data = {**SPEC, **changes}
    return json.dumps({k: v for k, v in data.items() if v is not None})


@dataclass(frozen=True)
class Bad:
    family: str  # the input family, for the count the issue asks for
    argv: str  # split on spaces; {t}: the row's directory, {port}: a closed port
    names: str  # the argument or key path the line names: "... <names>: ..."
    valid: str = ""  # and, where given, text saying what would be valid
    files: dict[str, str] = field(default_factory=dict)
    prog: str = ""  # the command the line starts with, when not the argv's first words


BASE = "--base-url http://127.0.0.1:{port}"
STEP = BASE + " --plan-json {} --work {t}/out/work --baseline {t}/out/base.json"
PLAN_FIELD = '{"concurrency":[0]}'
MIGRATE = "--spec {t}/spec.json"

# fmt: off
ROWS: dict[str, Bad] = {
    # --- specops (top level) -------------------------------------------------------
    "unknown-command": Bad("usage", "nosuch", "argument COMMAND", "choose from", prog="specops"),
    "group-without-subcommand": Bad("usage", "bench", "ACTION", "required"),
    # --- sweep plan: the cases first ---------------------------------------
    "sweep-objective-z-string": Bad(
        "sweep config", "sweep plan {t}/c.yml", "objective.z", "a number",
        {"c.yml": sweep(objective={"z": "high"})},
    ),
    "sweep-max-rounds-string": Bad(
        "sweep config", "sweep plan {t}/c.yml", "max_rounds", "integer >= 1",
        {"c.yml": sweep(max_rounds="three")},
    ),
    "sweep-zero-candidates": Bad(
        "sweep config", "sweep plan {t}/c.yml", "space", "no candidate",
        {"c.yml": sweep(base_profile={**NGRAM, "prompt_lookup_max": 4},
                        space={"prompt_lookup_min": "5..6"})},
    ),
    "sweep-unknown-canary": Bad(
        "sweep config", "sweep plan {t}/c.yml", "canary", "did you mean 'ct2-qwen'",
        {"c.yml": sweep(canary="ct2-qwn")},
    ),
    # The engine is stated once, by the canary's inference_engine_* (issue 49): a sweep
    # config naming vLLM 0.20.1 for an SGLang canary sweeps flags its build does not take.
    "sweep-engine-not-the-canarys": Bad(
        "sweep config", "sweep plan {t}/c.yml --inventory {t}/sg.ini", "engine",
        "valid: engine: {name: sglang, version: '0.5.11'}",
        {"c.yml": sweep(engine={"name": "vllm", "version": "0.20.1"}),
         "sg.ini": INVENTORY.replace("ct1\n", "ct1 inference_engine_engine=sglang\n")},
    ),
    "sweep-inventory-syntax-error": Bad(
        "sweep config", "sweep plan {t}/c.yml --inventory {t}/inv", "inventory",
        "inv/hosts.yml:5:1: YAML syntax error: While parsing a flow sequence",
        {"c.yml": sweep(), "inv/": "",
         "inv/hosts.yml": "all:\n  children:\n    serving:\n      hosts: [a\n"},
    ),
    "sweep-missing-inventory": Bad(
        "sweep config", "sweep plan {t}/c.yml --inventory {t}/nope.ini", "inventory",
        "no such inventory", {"c.yml": sweep()},
    ),
    "sweep-objective-unknown-key": Bad(
        "sweep config", "sweep plan {t}/c.yml", "objective.zz", "valid: concurrency, context",
        {"c.yml": sweep(objective={"zz": 1})},
    ),
    "sweep-objective-kind": Bad(
        "sweep config", "sweep plan {t}/c.yml", "objective.kind", "mean, latency, throughput",
        {"c.yml": sweep(objective={"kind": "speed"})},
    ),
    "sweep-objective-cell": Bad(
        "sweep config", "sweep plan {t}/c.yml", "objective.concurrency",
        "is not in the plan's concurrency",
        {"c.yml": sweep(objective={"kind": "latency", "concurrency": 3})},
    ),
    "sweep-plan-context-over-limit": Bad(
        "sweep config", "sweep plan {t}/c.yml --max-model-len 8192", "plan.context_lengths[1]",
        "the longest input that fits: 7936",
        {"c.yml": sweep(plan={"context_lengths": ["1K", "120K"]})},
    ),
    "sweep-predict-no-ledger": Bad(
        "path", "sweep predict {t}/c.yml --out {t}/out", "--out", "holds no sweep.jsonl",
        {"c.yml": sweep()},
    ),
    "sweep-objective-not-mapping": Bad(
        "sweep config", "sweep plan {t}/c.yml", "objective", "mapping",
        {"c.yml": sweep(objective=3)},
    ),
    "sweep-objective-float-repeats": Bad(
        "sweep config", "sweep plan {t}/c.yml", "objective.min_repeats", "an integer",
        {"c.yml": sweep(objective={"min_repeats": 2.5})},
    ),
    "sweep-objective-out-of-range": Bad(
        "sweep config", "sweep plan {t}/c.yml", "objective.min_gain", "[0, 1)",
        {"c.yml": sweep(objective={"min_gain": 1.5})},
    ),
    "sweep-unknown-key": Bad(
        "sweep config", "sweep plan {t}/c.yml", "spaces", "valid: apply_timeout_s",
        {"c.yml": sweep(spaces={})},
    ),
    "sweep-missing-space": Bad(
        "sweep config", "sweep plan {t}/c.yml", "space", "required", {"c.yml": sweep(space=None)},
    ),
    "sweep-empty-range": Bad(
        "sweep config", "sweep plan {t}/c.yml", "space.num_draft_tokens", "A must be <= B",
        {"c.yml": sweep(space={"num_draft_tokens": "9..2"})},
    ),
    "sweep-untunable": Bad(
        "sweep config", "sweep plan {t}/c.yml", "space.method", "valid:",
        {"c.yml": sweep(space={"method": ["ngram"]})},
    ),
    "sweep-restore-string": Bad(
        "sweep config", "sweep plan {t}/c.yml", "restore", "true or false",
        {"c.yml": sweep(restore="maybe")},
    ),
    "sweep-plan-list": Bad(
        "sweep config", "sweep plan {t}/c.yml", "plan", "mapping", {"c.yml": sweep(plan=[1])},
    ),
    "sweep-plan-bad-field": Bad(
        "sweep config", "sweep plan {t}/c.yml", "concurrency[0]", "integer >= 1",
        {"c.yml": sweep(plan={"concurrency": [0]})},
    ),
    "sweep-correctness-int": Bad(
        "sweep config", "sweep plan {t}/c.yml", "correctness", "mapping",
        {"c.yml": sweep(correctness=5)},
    ),
    "sweep-canary-int": Bad(
        "sweep config", "sweep plan {t}/c.yml", "canary", "string", {"c.yml": sweep(canary=7)},
    ),
    "sweep-engine-version": Bad(
        "sweep config", "sweep plan {t}/c.yml", "engine.version", "known:",
        {"c.yml": sweep(engine={"name": "vllm", "version": "1"})},
    ),
    "sweep-engine-capabilities": Bad(
        "sweep config", "sweep plan {t}/c.yml", "engine.capabilities", "list of names",
        {"c.yml": sweep(engine={"name": "sglang", "version": "0.5.11", "capabilities": 3})},
    ),
    "sweep-base-profile-int": Bad(
        "sweep config", "sweep plan {t}/c.yml", "base_profile", "mapping of method",
        {"c.yml": sweep(base_profile=7)},
    ),
    "sweep-output-gate-key": Bad(
        "sweep config", "sweep plan {t}/c.yml", "output_gate", "valid: detect_loops",
        {"c.yml": sweep(output_gate={"x": 1})},
    ),
    "sweep-max-candidates-zero": Bad(
        "sweep config", "sweep plan {t}/c.yml", "max_candidates", ">= 1",
        {"c.yml": sweep(max_candidates=0)},
    ),
    "sweep-apply-timeout": Bad(
        "sweep config", "sweep plan {t}/c.yml", "apply_timeout_s", "seconds > 0",
        {"c.yml": sweep(apply_timeout_s=-1)},
    ),
    "sweep-yaml-syntax": Bad("file", "sweep plan {t}/bad.yml", "config", "line 2, column"),
    "sweep-config-binary": Bad("file", "sweep plan {t}/binary.yml", "config", "not UTF-8"),
    "sweep-config-list": Bad("file", "sweep plan {t}/list.yml", "config", "mapping"),
    "sweep-config-missing": Bad("file", "sweep plan {t}/nope.yml", "config", "no such file"),
    "sweep-config-dir": Bad("file", "sweep plan {t}/a-dir", "config", "give a file"),
    "sweep-bad-mode": Bad(
        "usage", "sweep plan {t}/c.yml --mode fast", "--mode", "choose from", {"c.yml": sweep()},
    ),
    # --- sweep run --------------------------------------------------------------------
    "sweep-run-out-file": Bad(
        "path", "sweep run {t}/c.yml --out {t}/a-file", "--out", "give a directory",
        {"c.yml": sweep()},
    ),
    "sweep-run-out-under-file": Bad(
        "path", "sweep run {t}/c.yml --out {t}/a-file/run", "--out", "is a file",
        {"c.yml": sweep()},
    ),
    "sweep-run-objective": Bad(
        "sweep config", "sweep run {t}/c.yml --out {t}/out/s", "objective.z", "a number",
        {"c.yml": sweep(objective={"z": "high"})},
    ),
    "sweep-run-unknown-canary": Bad(
        "sweep config", "sweep run {t}/c.yml --out {t}/out/s --canary nope", "canary",
        "have: ct1, ct2-qwen", {"c.yml": sweep()},
    ),
    "sweep-run-api-key-missing": Bad(
        "path", "sweep run {t}/c.yml --out {t}/out/s --api-key-file {t}/nokey", "--api-key-file",
        "cannot read", {"c.yml": sweep()},
    ),
    # --- sweep report ---------------------------------------------------------------
    "sweep-report-no-ledger": Bad(
        "path", "sweep report {t}/c.yml --out {t}/out", "--out", "give the directory",
        {"c.yml": sweep()},
    ),
    "sweep-report-config": Bad(
        "sweep config", "sweep report {t}/c.yml --out {t}/out", "objective.z", "a number",
        {"c.yml": sweep(objective={"z": "high"})},
    ),
    "sweep-report-other-sweep": Bad(
        "sweep config", "sweep report {t}/c.yml --out {t}/out/s", "results",
        "belongs to a different sweep",
        {"c.yml": sweep(), "out/s/": "",
         "out/s/sweep.jsonl": '{"kind": "header", "fingerprint": {}}\n'},
    ),
    # --- rollout ------------------------------------------------------------------------
    "rollout-gate-missing": Bad(
        "path", "rollout gate --baseline {t}/nope.json --candidate {t}/results.json", "--baseline",
        "no such file",
    ),
    "rollout-gate-dir": Bad(
        "path", "rollout gate --baseline {t}/results.json --candidate {t}/a-dir", "--candidate",
        "give a file",
    ),
    "rollout-gate-not-json": Bad(
        "file", "rollout gate --baseline {t}/bad.json --candidate {t}/bad.json", "results",
        "not JSON",
    ),
    "rollout-gate-negative": Bad(
        "usage", "rollout gate --baseline {t}/a-file --candidate {t}/a-file --max-pass-drop -1",
        "--max-pass-drop", "integer >= 0",
    ),
    "rollout-gate-threshold": Bad(
        "usage", "rollout gate --baseline {t}/a-file --candidate {t}/a-file --throughput-drop lots",
        "--throughput-drop", "or off",
    ),
    "rollout-baseline-plan-json": Bad(
        "usage", "rollout baseline " + STEP.replace("{}", "{"), "--plan-json", "not JSON",
    ),
    "rollout-baseline-plan-field": Bad(
        "usage", "rollout baseline " + STEP.replace("{}", PLAN_FIELD), "concurrency[0]",
        "integer >= 1",
    ),
    "rollout-baseline-gate-json": Bad(
        "usage", f'rollout baseline {STEP} --output-gate-json {{"x":1}}', "--output-gate-json",
        "valid: detect_loops",
    ),
    "rollout-baseline-work-file": Bad(
        "path", f"rollout baseline {STEP.replace('out/work', 'a-file')}", "--work",
        "give a directory",
    ),
    "rollout-baseline-baseline-dir": Bad(
        "path", f"rollout baseline {STEP.replace('out/base.json', 'a-dir')}", "--baseline",
        "give a file path",
    ),
    "rollout-plain-max-age": Bad(
        "usage", f"rollout plain {BASE} --plan-json {{}} --work {{t}}/out/work"
        " --plain-baseline {t}/out/plain.json --max-age-days 0", "--max-age-days", "> 0",
    ),
    "rollout-plain-work-file": Bad(
        "path", f"rollout plain {BASE} --plan-json {{}} --work {{t}}/a-file"
        " --plain-baseline {t}/out/plain.json", "--work", "give a directory",
    ),
    "rollout-plain-baseline-dir": Bad(
        "path", f"rollout plain {BASE} --plan-json {{}} --work {{t}}/out/work"
        " --plain-baseline {t}/a-dir", "--plain-baseline", "give a file path",
    ),
    "rollout-objective-cell": Bad(
        "usage", 'rollout objective --plan-json {"model":"m","concurrency":[1,16]}'
        ' --objective-json {"kind":"latency","concurrency":4}', "objective.concurrency",
        "not in the plan's concurrency",
    ),
    "rollout-objective-not-json": Bad(
        "usage", 'rollout objective --plan-json {"model":"m"} --objective-json {',
        "--objective-json", "not JSON",
    ),
    "rollout-gate-plain-missing": Bad(
        "path", "rollout gate --baseline {t}/a-file --candidate {t}/a-file"
        " --plain-baseline {t}/none.json", "--plain-baseline", "",
    ),
    "rollout-baseline-unreachable": Bad(
        "server", f"rollout baseline {STEP}", "--base-url", "cannot reach",
    ),
    "rollout-smoke-unreachable": Bad(
        "server", f"rollout smoke {STEP}", "--base-url", "cannot reach",
    ),
    "rollout-smoke-humaneval": Bad(
        "usage", f"rollout smoke {STEP} --humaneval-limit -3", "--humaneval-limit", "integer >= 0",
    ),
    "rollout-report-missing": Bad(
        "path", "rollout report {t}/nope", "report_dir", "no such directory",
    ),
    "rollout-report-file": Bad("path", "rollout report {t}/a-file", "report_dir", "a file"),
    # --- bench run ----------------------------------------------------------------------
    "bench-out-file": Bad(
        "path", f"bench run {BASE} --out {{t}}/a-file", "--out", "give a directory",
    ),
    "bench-out-under-file": Bad(
        "path", f"bench run {BASE} --out {{t}}/a-file/runs", "--out", "is a file",
    ),
    "bench-unreachable": Bad(
        "server", f"bench run {BASE} --out {{t}}/out --json", "http://127.0.0.1:{port}/v1/models",
        "cannot reach",
    ),
    "bench-plan-missing": Bad(
        "path", "bench run --plan {t}/nope.yml --out {t}/out", "--plan", "no such file",
    ),
    "bench-plan-dir": Bad(
        "path", "bench run --plan {t}/a-dir --out {t}/out", "--plan", "give a file",
    ),
    "bench-plan-yaml": Bad(
        "file", "bench run --plan {t}/bad.yml --out {t}/out", "plan", "line 2, column",
    ),
    "bench-plan-json": Bad(
        "file", "bench run --plan {t}/p.json --out {t}/out", "plan", "line 1, column",
        {"p.json": "{'a': 1}"},
    ),
    "bench-plan-binary": Bad(
        "file", "bench run --plan {t}/binary.yml --out {t}/out", "plan", "not UTF-8 text",
    ),
    "bench-plan-list": Bad(
        "file", "bench run --plan {t}/list.yml --out {t}/out", "plan", "mapping",
    ),
    "bench-plan-unknown-field": Bad(
        "plan", "bench run --plan {t}/p.yml --out {t}/out", "concurency", "valid fields",
        {"p.yml": "base_url: http://127.0.0.1:8000\nconcurency: [1]\n"},
    ),
    "bench-plan-wrong-type": Bad(
        "plan", "bench run --plan {t}/p.yml --out {t}/out", "output_len", "integer >= 1",
        {"p.yml": "base_url: http://127.0.0.1:8000\noutput_len: lots\n"},
    ),
    "bench-plan-nested": Bad(
        "plan", "bench run --plan {t}/p.yml --out {t}/out", "slo", "",
        {"p.yml": "base_url: http://127.0.0.1:8000\nslo: 5\n"},
    ),
    "bench-concurrency": Bad(
        "plan", f"bench run {BASE} --concurrency 1,x --out {{t}}/out", "concurrency[1]",
        "integer >= 1",
    ),
    "bench-context": Bad(
        "plan", f"bench run {BASE} --context-lengths 1Q --out {{t}}/out", "context_lengths[0]",
        "like 1024 or 8K",
    ),
    "bench-output-len": Bad(
        "plan", f"bench run {BASE} --output-len -5 --out {{t}}/out", "output_len", ">= 1",
    ),
    "bench-base-url": Bad(
        "plan", "bench run --base-url ftp://x --out {t}/out", "base_url", "http(s) URL",
    ),
    "bench-url-ipv6": Bad(
        "plan", "bench run --base-url http://[::1 --out {t}/out", "base_url", "http(s) URL",
    ),
    "bench-url-port": Bad(
        "plan", "bench run --base-url http://127.0.0.1:99999 --out {t}/out", "base_url",
        "http(s) URL",
    ),
    "bench-gpu-count": Bad(
        "plan", f"bench run {BASE} --roofline-gpu-count 0 --out {{t}}/out", "roofline.gpu_count",
        ">= 1",
    ),
    "bench-seed": Bad("usage", f"bench run {BASE} --seed x", "--seed", "invalid int"),
    "bench-api": Bad("usage", f"bench run {BASE} --api grpc", "--api", "choose from"),
    "bench-prompt-file": Bad(
        "path", f"bench run {BASE} --prompt-file {{t}}/nope --out {{t}}/out", "--prompt-file",
        "no such file",
    ),
    "bench-tokenizer-dir": Bad(
        "path", f"bench run {BASE} --tokenizer-path {{t}}/a-dir --out {{t}}/out",
        "--tokenizer-path", "give a file",
    ),
    "bench-save-plan-dir": Bad(
        "path", f"bench run {BASE} --plan {{t}}/p.yml --save-plan {{t}}/a-dir --out {{t}}/out",
        "--save-plan", "give a file path", {"p.yml": "output_len: 8\n"},
    ),
    "bench-save-plan-without-plan": Bad(
        "usage", f"bench run {BASE} --save-plan {{t}}/out/p.yml --out {{t}}/out", "--save-plan",
        "needs --plan",
    ),
    # --- bench plan: the price before it runs ---------------------------------------------
    "bench-plan-context-over-limit": Bad(
        "plan", f"bench plan {BASE} --context-lengths 1K,120K --max-model-len 8192",
        "context_lengths[1]", "context_over_limit: clip",
    ),
    "bench-plan-max-model-len": Bad(
        "usage", f"bench plan {BASE} --max-model-len 0", "--max-model-len", "integer >= 1",
    ),
    "bench-plan-over-limit-choice": Bad(
        "usage", f"bench plan {BASE} --context-over-limit cut", "--context-over-limit",
        "choose from",
    ),
    "bench-plan-history-missing": Bad(
        "path", f"bench plan {BASE} --history {{t}}/nope.json", "--history", "no such file",
    ),
    "bench-resume-file": Bad(
        "path", "bench run --resume {t}/a-file", "--resume", "give a directory",
    ),
    "bench-resume-not-a-run": Bad(
        "path", "bench run --resume {t}/a-dir", "--resume", "not a run directory",
    ),
    "bench-resume-with-flags": Bad(
        "usage", "bench run --resume {t}/a-dir --reuse", "--reuse", "cannot be combined",
    ),
    # --- bench report / compare -----------------------------------------------------------
    "bench-report-missing": Bad("path", "bench report {t}/nope.json", "results", "no such"),
    "bench-report-dir": Bad("path", "bench report {t}/a-dir", "results", "give a file"),
    "bench-report-not-json": Bad("file", "bench report {t}/bad.json", "results", "not JSON"),
    "bench-report-schema": Bad(
        "file", "bench report {t}/results.json", "schema_version", "not supported",
    ),
    "bench-report-out-file": Bad(
        "path", "bench report {t}/results.json --out {t}/a-file", "--out", "give a directory",
    ),
    "bench-compare-missing": Bad(
        "path", "bench compare {t}/results.json {t}/nope.json", "RUN[2]", "no such file",
    ),
    "bench-compare-one-run": Bad(
        "usage", "bench compare {t}/results.json", "RUN", "at least two runs",
    ),
    "bench-compare-threshold": Bad(
        "usage", "bench compare {t}/a-file {t}/a-file --latency-rise -2", "--latency-rise",
        ">= 0, or off",
    ),
    "bench-compare-pass-drop": Bad(
        "usage", "bench compare {t}/a-file {t}/a-file --max-pass-drop x", "--max-pass-drop",
        "integer >= 0",
    ),
    # --- bench load (issue 51) ----------------------------------------------------------
    "bench-load-rate": Bad(
        "usage", f"bench load {BASE} --rate 100000 --duration 5", "--rate", "must be in (0, 500]",
    ),
    "bench-load-duration": Bad(
        "usage", f"bench load {BASE} --concurrency 2 --duration 0", "--duration", "must be in",
    ),
    "bench-load-unreachable": Bad(
        "server", f"bench load {BASE} --rate 1 --duration 1", "--model", "did not name one",
    ),
    "bench-load-command": Bad(
        "usage", f"bench load {BASE} --rate 1 --duration 1 sleep 1", "CMD", "after --",
    ),
    "bench-load-out-file": Bad(
        "path", f"bench load {BASE} --rate 1 --duration 1 --out {{t}}/a-file", "--out",
        "give a directory",
    ),
    # --- profile ------------------------------------------------------------------------
    "profile-missing": Bad(
        "path", "profile render --engine vllm --version 0.32.0 --profile {t}/nope.yml", "--profile",
        "no such file",
    ),
    "profile-dir": Bad(
        "path", "profile render --engine vllm --version 0.32.0 --profile {t}/a-dir", "--profile",
        "give a file",
    ),
    "profile-yaml": Bad(
        "file", "profile render --engine vllm --version 0.32.0 --profile {t}/bad.yml", "--profile",
        "line 2, column",
    ),
    "profile-list": Bad(
        "profile", "profile render --engine vllm --version 0.32.0 --profile {t}/list.yml",
        "speculative", "mapping of method",
    ),
    "profile-unknown-field": Bad(
        "profile", "profile render --engine vllm --version 0.32.0 --profile {t}/p.yml",
        "speculative.num_step", "", {"p.yml": "method: mtp\nnum_step: 2\n"},
    ),
    "profile-method-engine": Bad(
        "profile", "profile render --engine vllm --version 0.32.0 --profile {t}/p.yml",
        "speculative.method", "valid: none",
        {"p.yml": "method: ddtree\ndraft_model: /d\ntree_budget: 8\n"},
    ),
    "profile-version": Bad(
        "profile", "profile render --engine vllm --version abc --profile {t}/profile.yml",
        "engine.version", "known:",
    ),
    "profile-engine": Bad(
        "usage", "profile render --engine tgi --version 1 --profile {t}/profile.yml", "--engine",
        "choose from",
    ),
    "profile-flags-dir": Bad(
        "path",
        "profile render --engine vllm --version 0.32.0 --profile {t}/profile.yml --flags {t}/a-dir",
        "--flags", "give a file",
    ),
    "profile-flags-not-json": Bad(
        "file",
        "profile render --engine vllm --version 0.32.0 --profile {t}/profile.yml"
        " --flags {t}/bad.json",
        "--flags", "not a JSON flag set",
    ),
    "profile-table-check-missing": Bad(
        "path", "profile table --check {t}/nope.md", "--check", "no such file",
    ),
    "profile-table-no-markers": Bad(
        "file", "profile table --write {t}/a-file", "--write", "markers",
    ),
    "profile-table-binary": Bad(
        "file", "profile table --check {t}/binary.yml", "--check", "not UTF-8 text",
    ),
    "profile-table-write-dir": Bad(
        "path", "profile table --write {t}/a-dir", "--write", "give a file",
    ),
    "profile-table-both": Bad(
        "usage", "profile table --check {t}/a-file --write {t}/a-file", "--write",
        "not allowed with",
    ),
    "drafter-target-file": Bad(
        "path", "profile check-drafter --target {t}/a-file --drafter {t}/a-dir", "--target",
        "give a directory",
    ),
    # A hub id whose snapshot no cache here holds (issue 49): the file to fetch, named.
    "drafter-hub-id-not-cached": Bad(
        "profile", "profile check-drafter --target {t}/a-dir --drafter z-lab/Qwen3.6-27B-DFlash"
        " --hub-cache {t}/a-dir", "--drafter",
        "huggingface-cli download z-lab/Qwen3.6-27B-DFlash config.json --revision main",
    ),
    "drafter-window": Bad(
        "usage", "profile check-drafter --target {t}/a-dir --drafter {t}/a-dir --window x",
        "--window", "invalid int",
    ),
    # --- migrate ------------------------------------------------------------------------
    "migrate-spec-missing": Bad(
        "path", "migrate preflight --spec {t}/nope.json", "--spec", "no such file",
    ),
    "migrate-spec-dir": Bad("path", "migrate move --spec {t}/a-dir", "--spec", "give a file"),
    "migrate-spec-not-json": Bad(
        "file", "migrate locate --spec {t}/bad.json", "--spec", "not JSON: line 2, column 1",
    ),
    "migrate-spec-binary": Bad(
        "file", "migrate report --spec {t}/binary.yml", "--spec", "not JSON",
    ),
    "migrate-spec-list": Bad(
        "file", "migrate start --spec {t}/s.json", "--spec", "JSON object", {"s.json": "[1]"},
    ),
    "migrate-unknown-key": Bad(
        "migrate spec", f"migrate preflight {MIGRATE} --dry-run", "vmdi", "valid:",
        {"spec.json": spec(vmdi=101)},
    ),
    "migrate-vmid-range": Bad(
        "migrate spec", f"migrate preflight {MIGRATE} --dry-run", "vmid", "100..999999999",
        {"spec.json": spec(vmid=5)},
    ),
    "migrate-mode": Bad(
        "migrate spec", f"migrate preflight {MIGRATE} --dry-run", "mode", "one of migrate",
        {"spec.json": spec(mode="teleport")},
    ),
    "migrate-gpu-count": Bad(
        "migrate spec", f"migrate preflight {MIGRATE} --dry-run", "gpu_count", "0..16",
        {"spec.json": spec(gpu_model="NVIDIA RTX A6000", gpu_count=64)},
    ),
    "migrate-api-key": Bad(
        "migrate spec", f"migrate preflight {MIGRATE} --dry-run", "api.hots", "valid:",
        {"spec.json": spec(api={"hots": "x"})},
    ),
    # The CA the API is verified with (issue 49: an OSError and exit 70 before).
    "migrate-api-no-ca-file": Bad(
        "migrate spec", f"migrate preflight {MIGRATE} --dry-run", "api.verify",
        "copy a node's /etc/pve/pve-root-ca.pem there",
        {"spec.json": spec(api={"host": "127.0.0.1", "port": "{port}", "verify": "{t}/ca.pem"})},
    ),
    "migrate-facts-missing": Bad(
        "path", f"migrate preflight {MIGRATE} --target-facts {{t}}/nope.json", "--target-facts",
        "no such file", {"spec.json": spec()},
    ),
    "migrate-facts-not-json": Bad(
        "file", f"migrate preflight {MIGRATE} --dry-run --target-facts {{t}}/bad.json",
        "--target-facts", "not JSON", {"spec.json": spec()},
    ),
    "migrate-root-file": Bad(
        "path", f"migrate preflight {MIGRATE} --target-root {{t}}/a-file", "--target-root",
        "give a directory", {"spec.json": spec()},
    ),
    "migrate-record-info": Bad(
        "usage", f"migrate record {MIGRATE} --phase gpu --seconds 1 --info [1]", "--info",
        "JSON object", {"spec.json": spec()},
    ),
    "migrate-record-seconds": Bad(
        "usage", f"migrate record {MIGRATE} --phase gpu --seconds soon", "--seconds",
        "invalid float", {"spec.json": spec()},
    ),
    "migrate-report-markdown-dir": Bad(
        "path", f"migrate report {MIGRATE} --markdown {{t}}/a-dir", "--markdown",
        "give a file path", {"spec.json": spec()},
    ),
    # --- doctor -------------------------------------------------------------------------
    "doctor-from-missing": Bad("path", "doctor --from {t}/nope.json", "--from", "no such file"),
    "doctor-from-dir": Bad("path", "doctor --from {t}/a-dir", "--from", "give a file"),
    "doctor-from-not-json": Bad("file", "doctor --from {t}/bad.json", "--from", "not JSON"),
    "doctor-from-list": Bad("file", "doctor --from {t}/list.yml", "--from", "not JSON"),
    "doctor-from-shape": Bad(
        "file", "doctor --from {t}/d.json", "--from", "neither ansible's JSON callback",
        {"d.json": '{"plays": [{"tasks": [{"task": {}}]}]}'},
    ),
    "doctor-inventory": Bad("path", "doctor -i {t}/nope.ini", "--inventory", "no such inventory"),
}
# fmt: on


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root``: a directory, or a file's sha256 and mode."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_dir():
            out[rel] = "dir"
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[rel] = f"{digest} {path.stat().st_mode:o}"
    return out


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _fill(text: str, where: Path, port: int) -> str:
    return text.replace("{t}", str(where)).replace("{port}", str(port))


def _lay_out(where: Path, files: dict[str, str], port: int) -> None:
    for name, text in {**COMMON, **files}.items():
        if name.endswith("/"):
            (where / name).mkdir(parents=True, exist_ok=True)
        else:
            data = _fill(text, where, port).encode("utf-8", "surrogateescape")
            (where / name).write_bytes(data)


def _command(argv: list[str]) -> str:
    """``specops sweep plan``: the words before the first option or path."""
    words = []
    for word in argv:
        if word.startswith("-") or "/" in word:
            break
        words.append(word)
    return " ".join(["specops", *words])


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    row: Bad, tmp_path: Path, closed_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    _lay_out(tmp_path, row.files, closed_port)
    argv = _fill(row.argv, tmp_path, closed_port).split(" ")
    before = tree(tmp_path)
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert rc == 2, err
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.endswith("\n"), err
    command = row.prog or _command(argv)
    assert err.startswith(f"{command}: error: "), err
    names = _fill(row.names, tmp_path, closed_port)
    assert f" {names}: " in err or f" {names} (see " in err, err
    assert row.valid in err, err
    assert tree(tmp_path) == before


def test_the_base_sweep_config_is_accepted(
    tmp_path: Path, closed_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: the sweep rows fail for the one thing each changed."""
    _lay_out(tmp_path, {"c.yml": sweep()}, closed_port)
    assert cli.main(["sweep", "plan", str(tmp_path / "c.yml"), "--json"]) == 0, (
        capsys.readouterr().err
    )
    assert json.loads(capsys.readouterr().out)["candidates"] == 4


def test_every_subcommand_has_a_bad_input_row() -> None:
    """Each command path of ``specops`` (but the lab's) is exercised above."""
    import argparse  # noqa: PLC0415

    def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> list[str]:
        found: list[str] = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    found += leaves(child, (*path, name))
                return found
        return [" ".join(path)]

    commands = [c for c in leaves(cli.build_parser(), ()) if not c.startswith("lab")]
    assert len(commands) >= 18
    covered = {
        " ".join(w for w in row.argv.split(" ")[:2] if not w.startswith("-") and "{" not in w)
        for row in ROWS.values()
    }
    missing = [c for c in commands if c not in covered]
    assert not missing


def test_the_count_by_family(capsys: pytest.CaptureFixture[str]) -> None:
    """The count the issue's closing note gives (printed with -s)."""
    counts = Counter(row.family for row in ROWS.values())
    with capsys.disabled():
        print(
            "\nbad inputs by family:", dict(sorted(counts.items())), "total", sum(counts.values())
        )
    assert sum(counts.values()) >= 90
