"""The flag set of an INSTALLED engine, read from its own argument parser in its venv.

The speculative translator checks every flag it renders (and every ``extra_args`` /
``inference_service_engine_args`` entry) against a flag set. Recorded lists in
``flag_lists/`` (beside this file) cover the releases recorded there offline
(``speculative.engines.known_versions``); an engine built from a pull-request ref, or a
release without a recorded list, is checked against what that build itself accepts.
After every build the ``engine_flags`` module runs :data:`INTROSPECT` with the venv's
interpreter: it starts the very module the unit runs (``python -m
vllm.entrypoints.openai.api_server`` / ``python -m sglang.launch_server``) with
``--help``, and when that parser is about to print its help it takes the parser's
actions instead (option strings, arity, type, choices) and stops.
For vLLM it also reads ``SpeculativeMethod``, ``MTPModelTypes`` and the
``SpeculativeConfig`` fields (``vllm/config/speculative.py``), which
``--speculative-config`` JSON takes; for SGLang, from its ``server_args.py``, the
architectures whose MTP head NEXTN serves without a draft path
(:func:`sglang_self_draft_architectures`). The result is stored with the build
(``<venv>/.specops-engine-flags.json``) and in the audit record.

What a pull-request build adds is read from that set, never declared by hand
(:func:`capabilities`): ``ddtree`` when ``--speculative-algorithm`` offers ``DDTREE``
(SGLang PR #29907 registers it with ``--speculative-ddtree-budget``), ``draft_window``
when a draft-window flag exists (``--speculative-dflash-draft-window-size`` in SGLang
0.5.11, ``--speculative-draft-window-size`` in later SGLang).

Stdlib only: it runs on the managed host and on the controller
(``scripts/tools/extract-engine-flags.py`` uses the same script for the recorded lists).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
from collections.abc import Mapping
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.atomic_file import write_atomic
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import families

__all__ = [
    "FLAGS_FILE",
    "INTROSPECT",
    "LAUNCH_MODULES",
    "SELF_DRAFT_KEY",
    "WINDOW_FLAGS",
    "FlagSetError",
    "capabilities",
    "check_flag_set",
    "load_flag_set",
    "read_flag_set",
    "save_flag_set",
    "sglang_self_draft_architectures",
]

FLAGS_FILE = ".specops-engine-flags.json"
# The module each engine family's unit runs (engines.ENGINES: the launch module).
LAUNCH_MODULES: Mapping[str, str] = {f: d.launch_module for f, d in families().items()}
# SGLang's draft KV window flag: 0.5.11 spells it the first way, later releases the
# second (keeping the first as an alias).
WINDOW_FLAGS = ("--speculative-dflash-draft-window-size", "--speculative-draft-window-size")
# The flag set's ``speculative`` key listing the architectures SGLang's NEXTN serves
# without a draft path (:func:`sglang_self_draft_architectures`).
SELF_DRAFT_KEY = "nextn_self_draft_architectures"

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
    server_args = sys.modules.get("sglang.srt.server_args")
    if server_args is not None and getattr(server_args, "__file__", None):
        speculative["server_args_file"] = server_args.__file__
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
    speculative = data.get("speculative")
    if isinstance(speculative, dict) and speculative.get("server_args_file"):
        try:
            with open(speculative["server_args_file"], encoding="utf-8") as fh:
                source = fh.read()
        except OSError:
            source = ""
        archs = sglang_self_draft_architectures(source) if source else None
        if archs is not None:
            speculative[SELF_DRAFT_KEY] = archs
    return check_flag_set(data, python)


def sglang_self_draft_architectures(source: str) -> list[str] | None:
    """The target architectures whose MTP head SGLang serves with NEXTN/EAGLE and no
    ``--speculative-draft-model-path`` (it defaults the draft path to the model's own).

    Read from SGLang's ``server_args.py`` source with ``ast``: the list in
    ``ServerArgs._handle_speculative_decoding`` that a ``model_arch in [...]`` test checks
    before ``self.speculative_draft_model_path = self.model_path`` (0.5.11: DeepSeek V3/V3.2,
    GLM-4 MoE (+Lite, +DSA), Bailing MoE (V2, V2.5), Mistral Large 3, Pixtral, HY-V3;
    not MiMo, not Qwen3-Next, not Qwen3.5). None when the source has no such test.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.FunctionDef) and node.name == "_handle_speculative_decoding"):
            continue
        for test in ast.walk(node):
            if not (
                isinstance(test, ast.If)
                and isinstance(test.test, ast.Compare)
                and isinstance(test.test.left, ast.Name)
                and test.test.left.id == "model_arch"
                and len(test.test.ops) == 1
                and isinstance(test.test.ops[0], ast.In)
                and isinstance(test.test.comparators[0], (ast.List, ast.Tuple))
            ):
                continue
            if any(_sets_draft_path_to_model(stmt) for stmt in ast.walk(test)):
                values = test.test.comparators[0].elts
                return [
                    v.value
                    for v in values
                    if isinstance(v, ast.Constant) and isinstance(v.value, str)
                ]
    return None


def _sets_draft_path_to_model(node: ast.AST) -> bool:
    """``self.speculative_draft_model_path = self.model_path``."""
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Attribute)
        and node.targets[0].attr == "speculative_draft_model_path"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "model_path"
    )


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
