"""The "method x engine -> flags" table of docs/speculative.md, generated from the translator.

``specops profile table`` prints it; ``--check FILE`` fails when the copy between
``<!-- profile-table:start -->`` and ``<!-- profile-table:end -->`` in FILE differs,
``--write FILE`` replaces that copy.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import (
    Engine,
    known_versions,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import launch

from specops.errors import SpecopsError, ValidationError

__all__ = ["END", "EXAMPLES", "START", "check_file", "render_table", "write_file"]

START: Final = "<!-- profile-table:start -->"
END: Final = "<!-- profile-table:end -->"

# One representative profile per row; DRAFT stands for a drafter path.
EXAMPLES: Final[Sequence[Mapping[str, Any]]] = (
    {"method": "none"},
    {"method": "mtp", "num_steps": 3},
    {"method": "mtp", "num_steps": 3, "model_mtp_method": "qwen3_5_mtp"},
    {"method": "mtp", "num_steps": 2, "topk": 4, "num_draft_tokens": 8},
    {"method": "eagle", "draft_model": "DRAFT", "num_steps": 3},
    {"method": "eagle3", "draft_model": "DRAFT", "num_steps": 3},
    {"method": "dflash", "draft_model": "DRAFT", "num_draft_tokens": 16},
    {"method": "dflash", "draft_model": "DRAFT", "num_draft_tokens": 16, "draft_window": 2048},
    # the seeds' DDTree line (an SGLang build from PR #29907)
    {"method": "ddtree", "draft_model": "DRAFT", "tree_budget": 8, "topk": 4, "draft_window": 2048},
    {"method": "ngram", "num_draft_tokens": 4},
    {"method": "ngram", "num_draft_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5},
    {"method": "draft_model", "draft_model": "DRAFT", "num_steps": 4},
)


def _cell(profile: SpeculativeProfile, engine: Engine) -> str:
    try:
        argv, env = launch(profile, engine)
    except ValidationError as exc:
        return f"rejected: {exc}".replace("|", "\\|")
    text = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    text = (text + " " if text else "") + shlex.join(argv)
    return f"`{text}`" if text else "(no flags)"


def _profile_text(data: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in data.items())


def render_table() -> str:
    """The table as Markdown, newest known SGLang and vLLM versions."""
    sglang = Engine("sglang", known_versions("sglang")[-1])
    ddtree = Engine("sglang", sglang.version, frozenset({"ddtree"}))
    vllm = Engine("vllm", known_versions("vllm")[-1])
    lines = [
        f"| profile | SGLang {sglang.version} | vLLM {vllm.version} |",
        "| --- | --- | --- |",
    ]
    for data in EXAMPLES:
        profile = SpeculativeProfile.from_mapping(data)
        sg = _cell(profile, sglang)
        if profile.method == "ddtree":
            sg = f"{sg}<br>a build whose flags offer `DDTREE` (PR #29907): {_cell(profile, ddtree)}"
        lines.append(f"| `{_profile_text(data)}` | {sg} | {_cell(profile, vllm)} |")
    return "\n".join(lines) + "\n"


def _split(text: str, path: Path) -> tuple[str, str, str]:
    head, start, rest = text.partition(START)
    body, end, tail = rest.partition(END)
    if not start or not end:
        raise SpecopsError(f"{path}: no {START} ... {END} markers")
    return head, body, tail


def check_file(path: Path) -> bool:
    """True when the table between the markers in ``path`` is the current one."""
    _, body, _ = _split(path.read_text("utf-8"), path)
    return body.strip("\n") == render_table().strip("\n")


def write_file(path: Path) -> bool:
    """Replace the table between the markers; True when the file changed."""
    text = path.read_text("utf-8")
    head, _body, tail = _split(text, path)
    new = f"{head}{START}\n{render_table()}{END}{tail}"
    if new == text:
        return False
    path.write_text(new, "utf-8")
    return True
