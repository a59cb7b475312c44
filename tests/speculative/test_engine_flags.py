"""Rendered argv against the engines' extracted flag lists; the extractor itself.

SGLang 0.5.11's own parser cannot be imported without a GPU stack (server_args.py
imports torch and triton-backed modules at module level), so its argv is parsed by an
argparse parser rebuilt from the flag list extracted from the wheel's server_args.py.
The vLLM argv is fed to vLLM's real parser in test_vllm_parser.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import FlagList
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import (
    vllm_speculative_config,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from specops.errors import ValidationError
from specops.speculative import Engine, SpeculativeProfile, from_argv, to_argv


def argparser(flags: FlagList) -> argparse.ArgumentParser:
    """An argparse parser with the engine's options, arity, int types and choices."""
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False, add_help=False)
    seen: dict[str, list[str]] = {}
    for name, spec in flags.flags.items():
        seen.setdefault(spec.dest + "|" + spec.nargs, []).append(name)
    for key, names in seen.items():
        spec = flags.flags[names[0]]
        kwargs: dict[str, Any] = {"dest": key.split("|")[0]}
        if spec.nargs == "0":
            kwargs["action"] = "store_true"
        else:
            if spec.nargs != "1":
                kwargs["nargs"] = int(spec.nargs) if spec.nargs.isdigit() else spec.nargs
            if spec.type == "int":
                kwargs["type"] = int
            if spec.choices is not None and not spec.open_choices:
                kwargs["choices"] = spec.choices
        parser.add_argument(*names, **kwargs)
    return parser


def test_sglang_flag_list_is_the_wheels(sglang: Engine) -> None:
    flags = sglang.flags
    assert flags.values("algorithms") == (
        "DFLASH",
        "EAGLE",
        "EAGLE3",
        "NEXTN",
        "STANDALONE",
        "NGRAM",
    )
    assert "server_args.py" in flags.source
    for name in (
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        "--speculative-dflash-draft-window-size",
        "--speculative-dflash-block-size",
        "--speculative-eagle-topk",
        "--model-path",
    ):
        assert name in flags.flags
    assert flags.flags["--speculative-draft-model"].dest == "speculative_draft_model_path"
    assert "--speculative-ddtree-budget" not in flags.flags
    assert "--speculative-ddtree-budget" in Engine.parse("sglang", "0.5.11", ["ddtree"]).flags.flags
    assert "--speculative-draft-window-size" not in flags.flags  # the later rename


def test_vllm_flag_list_is_the_real_parsers(vllm: Engine) -> None:
    flags = vllm.flags
    assert "make_arg_parser" in flags.source
    for method in ("mtp", "eagle", "eagle3", "dflash", "ngram", "draft_model", "qwen3_5_mtp"):
        assert method in flags.values("methods")
    assert "ddtree" not in flags.values("methods")
    assert {"method", "model", "num_speculative_tokens", "revision", "prompt_lookup_min"} <= set(
        flags.values("config_fields")
    )
    assert "--speculative-config" in flags.flags


SERVER_ARGS_SNIPPET = """
import argparse
LOAD_FORMAT_CHOICES = ["auto", "pt"]

class ServerArgs:
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        parser.add_argument("--model-path", "--model", type=str, required=True)
        parser.add_argument("--load-format", type=str, choices=LOAD_FORMAT_CHOICES)
        parser.add_argument("--speculative-algorithm", type=str, choices=["EAGLE", "NGRAM"])
        parser.add_argument("--speculative-num-steps", type=int)
        parser.add_argument("--enable-x", action="store_true")
        parser.add_argument("--lora-paths", type=str, nargs="*")
        parser.add_argument("--flag-y", action=argparse.BooleanOptionalAction)
"""


def test_extractor_parses_server_args(tmp_path: Path, repo_root: Path) -> None:
    source = tmp_path / "server_args.py"
    source.write_text(SERVER_ARGS_SNIPPET)
    out = tmp_path / "flags.json"
    subprocess.run(
        [sys.executable, str(repo_root / "scripts" / "tools" / "extract-engine-flags.py"), "sglang",
         "--server-args", str(source), "--version", "9.9.9", "-o", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    data = json.loads(out.read_text())
    assert data["speculative"] == {"algorithms": ["EAGLE", "NGRAM"]}
    flags = data["flags"]
    assert flags["--model"] == flags["--model-path"]
    assert flags["--model-path"]["aliases"] == ["--model"]
    assert flags["--load-format"]["choices"] == ["auto", "pt"]
    assert flags["--load-format"]["choices_ref"] == "LOAD_FORMAT_CHOICES"
    assert flags["--speculative-num-steps"] == {
        "dest": "speculative_num_steps", "nargs": "1", "type": "int", "choices": None
    }  # fmt: skip
    assert flags["--enable-x"]["nargs"] == "0"
    assert flags["--lora-paths"]["nargs"] == "*"
    assert {"--flag-y", "--no-flag-y"} <= set(flags)


# Hypothesis: any valid profile renders argv that the engine's parser accepts and that
# reads back to the same settings.
_ints = st.integers(min_value=1, max_value=64)
_paths = st.sampled_from(["/srv/models/draft", "org/Drafter-1B", "/m/d w/space"])
_maybe = st.one_of(st.none(), st.text("abcdef0123456789", min_size=1, max_size=12))


@st.composite
def profiles(  # noqa: PLR0912 - one branch per method's fields
    draw: st.DrawFn,
) -> SpeculativeProfile:
    method = draw(st.sampled_from(["none", "mtp", "eagle", "eagle3", "dflash", "ddtree",
                                   "ngram", "draft_model"]))  # fmt: skip
    data: dict[str, Any] = {"method": method}
    if method in ("mtp", "eagle", "eagle3", "draft_model"):
        steps = draw(_ints)
        data["num_steps"] = steps
        topk = draw(st.sampled_from([None, 1, 2, 4]))
        if topk is not None:
            data["topk"] = topk
        if topk and topk > 1:
            data["num_draft_tokens"] = draw(st.integers(2, steps * topk + 1))
        elif draw(st.booleans()):
            data["num_draft_tokens"] = steps + 1
    if method in ("eagle", "eagle3", "draft_model", "dflash", "ddtree"):
        data["draft_model"] = draw(_paths)
        if (rev := draw(_maybe)) is not None:
            data["draft_model_revision"] = rev
    if method == "mtp" and draw(st.booleans()):
        data["model_mtp_method"] = draw(st.sampled_from(["mtp", "qwen3_5_mtp", "deepseek_mtp"]))
    if method == "dflash":
        block = draw(st.one_of(st.none(), st.integers(2, 32)))
        if block is not None:
            data["num_draft_tokens"] = block
        if draw(st.booleans()):
            data["draft_window"] = draw(st.integers(block or 1, 8192))
    if method == "ddtree":
        data["tree_budget"] = draw(_ints)
    if method == "ngram":
        data["num_draft_tokens"] = draw(st.integers(2, 16))
        low = draw(st.one_of(st.none(), st.integers(1, 5)))
        if low is not None:
            data["prompt_lookup_min"] = low
        if draw(st.booleans()):
            data["prompt_lookup_max"] = draw(st.integers(low or 1, 8))
    return SpeculativeProfile.from_mapping(data)


def _render(
    profile: SpeculativeProfile, engine: Engine
) -> tuple[list[str] | None, ValidationError | None]:
    try:
        return to_argv(profile, engine), None
    except ValidationError as exc:
        return None, exc


ENGINES = [("sglang", ()), ("sglang", ("ddtree",)), ("vllm", ()), ("vllm-cpu", ())]


@settings(max_examples=300, deadline=None)
@given(profile=profiles(), which=st.sampled_from(ENGINES))
def test_rendered_argv_reparses_to_the_same_settings(
    profile: SpeculativeProfile, which: tuple[str, tuple[str, ...]]
) -> None:
    version = "0.5.11" if which[0] == "sglang" else "0.32.0"
    engine = Engine.parse(which[0], version, which[1])
    argv, error = _render(profile, engine)
    if error is not None:
        assert error.field.startswith("speculative.")
        return
    assert argv is not None
    back = from_argv(argv, engine)
    assert to_argv(back, engine) == argv
    assert back.method == profile.method
    same = ["draft_model", "draft_model_revision", "draft_window", "tree_budget",
            "prompt_lookup_min", "prompt_lookup_max"]  # fmt: skip
    chain = profile.method in ("mtp", "eagle", "eagle3", "draft_model")
    if not chain:
        same.append("num_draft_tokens")
    for name in same:
        assert getattr(back, name) == getattr(profile, name), name
    if chain:
        assert back.num_steps == profile.num_steps
        assert back.effective_num_draft_tokens == profile.effective_num_draft_tokens
    namespace = argparser(engine.flags).parse_args(
        ["--model-path", "m", *argv] if engine.family == "sglang" else argv
    )
    if engine.family == "sglang" and profile.method != "none":
        assert namespace.speculative_draft_model_path == profile.draft_model
        assert namespace.speculative_draft_model_revision == profile.draft_model_revision
        assert namespace.speculative_dflash_draft_window_size == profile.draft_window
    if engine.family == "vllm" and profile.method != "none":
        assert json.loads(namespace.speculative_config) == vllm_speculative_config(profile, engine)
