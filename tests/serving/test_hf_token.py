"""The hub token during the inference_engine role's weights download (issue 19).

The role's own weights tasks (``tasks_from: weights.yml``) on localhost, as the role
runs them (``become`` to the service user), with the lab vLLM venv's real
``huggingface_hub`` and ``HF_ENDPOINT`` pointed at a hub stand-in on 127.0.0.1 that
records each request's Authorization header and answers 401 (no network here, and no
model to fetch: the download is refused, which is fine, the token's path is what is
tested). While the play runs every process's /proc/<pid>/cmdline is scanned: the token
must reach the hub in the request only, never a command line (a task's
``environment: {HF_TOKEN: ...}`` put it into ``su``'s and ``sh -c``'s argv), never the
-vvv output, never a file (it comes on the fetch's standard input; the hf-token file
earlier versions kept in the state directory is removed).
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from plugins.secret_scan import CmdlineScan

from specops_lab.vllm import LabPaths

REPO = Path(__file__).resolve().parents[2]
TOKEN = "hf_issue19TestTokenNotReal0123456789"  # noqa: S105  (a test value)


class _Hub(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str]]] = []

    def _answer(self) -> None:
        _Hub.seen.append((self.path, self.headers.get("Authorization", "")))
        body = b'{"error": "Invalid credentials in Authorization header"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_POST = _answer

    def log_message(self, *_args: object) -> None:
        return None


@pytest.fixture
def hub() -> Iterator[int]:
    _Hub.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_hub_token_travels_on_stdin_never_a_command_line_or_a_file(
    vllm_lab: LabPaths, hub: int, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "hf-token").write_text("hf_left_by_an_earlier_version")
    playbook = tmp_path / "weights.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n"
        # not a secret: where the hub is (the stand-in), for the role's own tasks
        f"  environment: {{HF_ENDPOINT: 'http://127.0.0.1:{hub}', HF_HUB_ETAG_TIMEOUT: '5'}}\n"
        "  tasks:\n"
        "    - ansible.builtin.include_role:\n"
        "        name: inference_engine\n"
        "        tasks_from: weights.yml\n"
    )
    variables = {
        "ansible_python_interpreter": sys.executable,
        "ansible_become_method": "su",  # no sudo on this machine; su as root asks nothing
        "inference_engine_user": "root",
        "inference_engine_group": "root",
        "inference_engine_state_dir": str(state),
        "inference_engine_cache_dir": str(tmp_path / "cache"),
        "inference_engine_engine": "vllm-cpu",  # required (no default)
        "inference_engine_model": "specops-test/gated-model",
        "inference_engine_hf_token": TOKEN,
        "__inference_engine_venv": str(vllm_lab.venv),
        "__inference_engine_current": True,
    }
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(variables))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CACHE_PLUGIN": "memory",
    }
    env.pop("HF_TOKEN", None)
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-vvv",
            str(playbook), "-e", f"@{extra}"]  # fmt: skip
    with CmdlineScan(TOKEN, markers=("snapshot_download",)) as scan:
        result = subprocess.run(
            argv, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300
        )
    out = result.stdout + result.stderr
    # The stand-in refuses the model (401), so the fetch fails; what matters is how the
    # token got to the request.
    assert "TASK [inference_engine : Fetch the hub models into the cache.]" in out, out[-3000:]
    assert result.returncode == 2, out[-3000:]
    assert any(auth == f"Bearer {TOKEN}" for _path, auth in _Hub.seen), _Hub.seen
    assert scan.seen["snapshot_download"] > 0, "the scan never saw the fetch running"
    print(f"{scan.scans} scans of /proc/*/cmdline; hub requests: {len(_Hub.seen)}")
    assert scan.hits == [], "\n".join(scan.hits)
    assert TOKEN not in out
    assert not (state / "hf-token").exists(), "the file an earlier version kept is removed"
    written = [*state.rglob("*"), *(tmp_path / "cache").rglob("*")]  # the role's folders
    kept = [p for p in written if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert kept == [], "no file holds the token"
