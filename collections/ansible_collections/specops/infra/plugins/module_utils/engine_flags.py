"""The flag set of an INSTALLED engine, read from its own argument parser in its venv.

The speculative translator checks every flag it renders (and every ``extra_args`` /
``inference_service_engine_args`` entry) against a flag set. Recorded lists in
``engine_flag_lists/`` (beside this file) cover released versions offline; an engine built from a
pull-request ref, or a release without a recorded list (vLLM 0.20.1), is checked
against what that build itself accepts. After every build the ``engine_flags`` module
runs :data:`INTROSPECT` with the venv's interpreter: it starts the very module the unit
runs (``python -m vllm.entrypoints.openai.api_server`` / ``python -m
sglang.launch_server``) with ``--help``, and when that parser is about to print its help
it takes the parser's actions instead (option strings, arity, type, choices) and stops.
For vLLM it also reads ``SpeculativeMethod``, ``MTPModelTypes`` and the
``SpeculativeConfig`` fields (``vllm/config/speculative.py``), which
``--speculative-config`` JSON takes. The result is stored with the build
(``<venv>/.specops-engine-flags.json``) and in the audit record.

What a pull-request build adds is read from that set, never declared by hand
(:func:`capabilities`): ``ddtree`` when ``--speculative-algorithm`` offers ``DDTREE``
(SGLang PR #29907 registers it with ``--speculative-ddtree-budget``), ``draft_window``
when a draft-window flag exists (``--speculative-dflash-draft-window-size`` in SGLang
0.5.11, ``--speculative-draft-window-size`` in later SGLang).

Stdlib only: it runs on the managed host and on the controller
(``scripts/extract-engine-flags.py`` uses the same script for the recorded lists).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.atomic_file import write_atomic
from ansible_collections.specops.infra.plugins.module_utils.engines import families

__all__ = [
    "FLAGS_FILE",
    "INTROSPECT",
    "LAUNCH_MODULES",
    "WINDOW_FLAGS",
    "FlagSetError",
    "capabilities",
    "check_flag_set",
    "load_flag_set",
    "read_flag_set",
    "save_flag_set",
]

FLAGS_FILE = ".specops-engine-flags.json"
# The module each engine family's unit runs (engines.ENGINES: the launch module).
LAUNCH_MODULES: Mapping[str, str] = {f: d.launch_module for f, d in families().items()}
# SGLang's draft KV window flag: 0.5.11 spells it the first way, later releases the
# second (keeping the first as an alias).
WINDOW_FLAGS = ("--speculative-dflash-draft-window-size", "--speculative-draft-window-size")

# Runs with the ENGINE's interpreter: argv = launch module, family. Prints one JSON line.
INTROSPECT = r"""
import argparse, dataclasses, importlib.metadata as md, json, runpy, sys, typing

module, family = sys.argv[1], sys.argv[2]
caught = []


class _Caught(BaseException):
    pass


def _take(self, *args, **kwargs):
    caught.append(self)
    raise _Caught()


argparse.ArgumentParser.print_help = _take
sys.argv = [module, "--help"]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except _Caught:
    pass
except SystemExit as exc:
    raise SystemExit(f"{module} --help exited ({exc.code}) before its parser printed help")
if not caught:
    raise SystemExit(f"{module} --help printed no help from an argparse parser")
parser = caught[-1]
flags = {}
for action in parser._actions:
    nargs = action.nargs
    if nargs is None:
        nargs = "1"
    kind = type(action).__name__
    if action.nargs == 0 or kind in ("_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction",
                                     "_CountAction", "_HelpAction", "_VersionAction"):
        nargs = "0"
    for name in action.option_strings:
        if not name.startswith("--"):
            continue
        flags[name] = {
            "dest": action.dest,
            "nargs": str(nargs),
            "type": getattr(action.type, "__name__", None) if action.type else None,
            "choices": [str(c) for c in action.choices] if action.choices else None,
        }
version = ""
for dist in (family, family + "-cpu"):
    try:
        version = md.version(dist)
        break
    except md.PackageNotFoundError:
        pass
speculative = {}
if family == "sglang":
    algo = flags.get("--speculative-algorithm") or {}
    speculative["algorithms"] = algo.get("choices") or []
else:
    def flat(tp):
        out = []
        for arg in typing.get_args(tp):
            out.extend([arg] if isinstance(arg, str) else flat(arg))
        return out
    try:
        from vllm.config import speculative as spec
        speculative["methods"] = sorted(set(flat(spec.SpeculativeMethod)))
        speculative["mtp_methods"] = sorted(set(flat(getattr(spec, "MTPModelTypes", None))))
        speculative["config_fields"] = [
            f.name for f in dataclasses.fields(spec.SpeculativeConfig) if f.init
        ]
    except Exception as exc:
        speculative["unread"] = f"{type(exc).__name__}: {exc}"[:300]
print(json.dumps({
    "engine": family,
    "version": version,
    "launch": module,
    "source": f"{module} --help: its argparse parser, read in {sys.executable}",
    "speculative": speculative,
    "flags": dict(sorted(flags.items())),
}))
"""


class FlagSetError(RuntimeError):
    """The engine's parser could not be read, or a flag set file is malformed."""


def check_flag_set(data: Any, where: str) -> dict[str, Any]:
    """``data`` if it is a flag set (engine, flags with dest/nargs), else FlagSetError."""
    if not isinstance(data, dict):
        raise FlagSetError(f"{where}: not a JSON object")
    flags = data.get("flags")
    if not isinstance(flags, dict) or not flags:
        raise FlagSetError(f"{where}: no 'flags' mapping")
    for name, spec in flags.items():
        if not isinstance(spec, dict) or "dest" not in spec or "nargs" not in spec:
            raise FlagSetError(f"{where}: flag {name!r} has no dest/nargs")
    if data.get("engine") not in LAUNCH_MODULES:
        raise FlagSetError(f"{where}: engine must be one of {', '.join(LAUNCH_MODULES)}")
    if not isinstance(data.get("speculative", {}), dict):
        raise FlagSetError(f"{where}: 'speculative' must be a mapping")
    return data


def read_flag_set(
    python: str, family: str, *, timeout: float = 900.0, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run :data:`INTROSPECT` with ``python`` (the engine venv's); the flag set."""
    if family not in LAUNCH_MODULES:
        raise FlagSetError(f"engine family must be one of {', '.join(LAUNCH_MODULES)}")
    run_env = dict(env if env is not None else os.environ)
    run_env.setdefault("PYTHONWARNINGS", "ignore")
    try:
        proc = subprocess.run(
            [python, "-c", INTROSPECT, LAUNCH_MODULES[family], family],
            capture_output=True, text=True, check=False, timeout=timeout, env=run_env,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FlagSetError(f"{python}: could not run the engine's parser: {exc}") from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise FlagSetError(
            f"{python} -m {LAUNCH_MODULES[family]} --help: exit {proc.returncode}: "
            + " | ".join(tail)
        )
    try:
        data = json.loads(lines[-1])
    except ValueError as exc:
        raise FlagSetError(f"{python}: the flag set is not JSON ({exc})") from None
    return check_flag_set(data, python)


def capabilities(flag_set: Mapping[str, Any]) -> list[str]:
    """What this build can do beyond a plain release, read from its own flags."""
    flags = flag_set.get("flags") or {}
    algo = flags.get("--speculative-algorithm") or {}
    caps = []
    if "DDTREE" in (algo.get("choices") or ()) or "--speculative-ddtree-budget" in flags:
        caps.append("ddtree")
    if any(name in flags for name in WINDOW_FLAGS):
        caps.append("draft_window")
    return caps


def save_flag_set(path: str, flag_set: Mapping[str, Any]) -> bool:
    """Write the flag set (JSON) when it differs from the file; True when written."""
    text = json.dumps(flag_set, indent=1, sort_keys=True) + "\n"
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text:
                return False
    except FileNotFoundError:
        pass
    write_atomic(path, text, 0o644)
    return True


def load_flag_set(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise FlagSetError(f"{path}: {exc}") from None
    return check_flag_set(data, path)
