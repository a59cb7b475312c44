"""specops_lab.unit_exec reads a unit as systemd executes it: the inverse of the role's
quoting filters and of the service step's EnvironmentFile writer."""

from __future__ import annotations

import json

import pytest
from ansible_collections.specops.infra.plugins.filter.systemd import (
    systemd_command,
    systemd_quote,
)
from ansible_collections.specops.infra.plugins.module_utils.service_unit import (
    render_environment_file,
)
from hypothesis import given
from hypothesis import strategies as st

from specops_lab import unit_exec

# Printable words without control characters (systemd_quote refuses those).
_word = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters="\x7f"),
    min_size=1,
    max_size=24,
)


@given(st.lists(_word, min_size=0, max_size=6))
def test_exec_start_round_trip(words: list[str]) -> None:
    argv = ["/opt/venv/bin/python", *words]
    unit = f"[Service]\nExecStart={systemd_command(argv)}\n"
    svc = unit_exec.parse_unit(unit)
    assert svc.argv({}) == argv


@given(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), _word, max_size=5))
def test_environment_round_trip(env: dict[str, str]) -> None:
    lines = "".join(
        f"Environment={systemd_quote(f'{k}={v}', where='environment')}\n" for k, v in env.items()
    )
    svc = unit_exec.parse_unit("[Service]\n" + lines)
    assert svc.environment == env


@given(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), _word, max_size=5))
def test_environment_file_round_trip(values: dict[str, str]) -> None:
    assert unit_exec.read_environment_file(render_environment_file(values)) == values


def test_speculative_json_reaches_the_server_unchanged() -> None:
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4})
    argv = [
        "/v/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--speculative-config",
        spec,
    ]
    text = systemd_command(argv)
    assert '\\"method\\"' in text  # quoted for systemd, not for a shell
    assert unit_exec.parse_unit(f"[Service]\nExecStart={text}\n").argv({})[-1] == spec


def test_variables_expand_in_command_lines_only() -> None:
    unit = (
        "[Service]\n"
        'Environment="PRICE=$5 and 100%%"\n'
        "EnvironmentFile=/etc/specops/x.env\n"
        "UnsetEnvironment=SGLANG_SIMULATE_ACC_LEN\n"
        "ExecStart=/srv/v/bin/python -m sglang.launch_server --api-key ${SPECOPS_API_KEY}"
        " --note $$HOME --words $WORDS\n"
    )
    svc = unit_exec.parse_unit(unit)
    env = svc.final_environment(
        {"/etc/specops/x.env": "SPECOPS_API_KEY='k$y'\nSGLANG_SIMULATE_ACC_LEN=3\nWORDS=a b\n"}
    )
    assert env["PATH"] == unit_exec.SYSTEMD_PATH  # what systemd gives every service
    assert env["PRICE"] == "$5 and 100%"  # no expansion in Environment=, %% is %
    assert "SGLANG_SIMULATE_ACC_LEN" not in env  # UnsetEnvironment= wins over the file
    assert svc.argv(env)[-7:] == ["--api-key", "k$y", "--note", "$HOME", "--words", "a", "b"]


def test_prefixes_and_missing_environment_file() -> None:
    svc = unit_exec.parse_unit(
        "[Service]\nEnvironmentFile=-/etc/none.env\nEnvironmentFile=/etc/must.env\n"
        "ExecStartPre=+/usr/bin/install -d /var/cache/x\nExecStartPre=-/bin/false\n"
        "ExecStart=/bin/true\n"
    )
    assert [(c.privileged, c.ignore_failure) for c in svc.exec_start_pre] == [
        (True, False),
        (False, True),
    ]
    with pytest.raises(unit_exec.UnitError, match=r"EnvironmentFile=/etc/must.env: missing"):
        svc.final_environment({"/etc/none.env": None, "/etc/must.env": None})


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("ExecStart=python -m x", "absolute path"),
        ('ExecStart=/bin/echo "open', "unterminated"),
        ("ExecStart=/bin/echo %n", "specifier '%n'"),
        ("Environment=NOVALUE", "not NAME=value"),
    ],
)
def test_what_systemd_would_refuse_is_named(line: str, message: str) -> None:
    with pytest.raises(unit_exec.UnitError, match=message):
        unit_exec.parse_unit(f"[Service]\n{line}\n")


def test_runtime_directory_is_read_as_systemd_makes_it() -> None:
    svc = unit_exec.parse_unit(
        "[Service]\nRuntimeDirectory=specops-a specops-a/sub\nRuntimeDirectoryMode=0700\n"
        "ExecStart=/bin/true\n"
    )
    assert svc.runtime_paths() == ["/run/specops-a", "/run/specops-a/sub"]
    assert svc.runtime_directory_mode == 0o700
    assert unit_exec.parse_unit("[Service]\nExecStart=/bin/true\n").runtime_directory_mode == 0o755
    for bad, said in (
        ("RuntimeDirectory=/run/x", "a relative path under /run"),
        ("RuntimeDirectory=a/../../etc", "a relative path under /run"),
        ("RuntimeDirectoryMode=rwx", "an octal mode"),
    ):
        with pytest.raises(unit_exec.UnitError, match=said):
            unit_exec.parse_unit(f"[Service]\n{bad}\nExecStart=/bin/true\n")
