"""Connection ``specops.lab.container``: a lab LXC container, reached with ``lxc-attach``
(TEST STAND-IN for production's ssh; see the collection README)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from typing import Any

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.plugins.connection import ConnectionBase

DOCUMENTATION = r"""
name: container
short_description: Run tasks in a lab LXC container through lxc-attach, modules piped
description:
  - TEST STAND-IN of the specops lab, where a serving container has no sshd; production
    reaches its containers over ssh (with pipelining, C(ansible.cfg)). Each command is one
    C(lxc-attach --clear-env) into the container (its own namespaces, cgroup and
    LSM profile, the environment cleared as a login over ssh would start it), with the
    module piped to the interpreter on stdin, so a task is one round trip as with ssh.
  - Files are copied through the same attach (C(cat) in the container), so they land
    with the container's own view of its filesystem (id mapping included).
  - A stopped or unknown container is a connection failure that names it.
author: specops maintainers
version_added: 0.1.0
options:
  remote_addr:
    description: The container's LXC name (the lab's C(<node>-<vmid>)).
    type: string
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
  lxcpath:
    description: The LXC path that holds the container (C(lxc-attach -P)).
    type: string
    default: /var/lib/lxc
    vars:
      - name: ansible_lxc_path
  executable:
    description: The shell commands run with inside the container.
    type: string
    default: /bin/sh
    vars:
      - name: ansible_executable
  pipelining:
    description: Pipe modules to the interpreter instead of copying them (on by default here).
    type: boolean
    default: true
    vars:
      - name: ansible_pipelining
"""


class Connection(ConnectionBase):  # type: ignore[misc]
    """A lab LXC container (see DOCUMENTATION; ansible is untyped here)."""

    transport = "specops.lab.container"
    has_pipelining = True
    default_user = "root"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lxc_attach = ""

    def _name(self) -> str:
        name = str(self.get_option("remote_addr") or "")
        if not name or "/" in name or name.startswith("-"):
            raise AnsibleConnectionFailure(
                f"specops.lab.container: {name!r} is not an LXC container name"
            )
        return name

    def _argv(self, argv: list[str]) -> list[str]:
        return [
            self._lxc_attach,
            "-P",
            str(self.get_option("lxcpath")),
            "-n",
            self._name(),
            "--clear-env",
            "--",
            *argv,
        ]

    def _connect(self) -> Any:
        if self.connected:
            return self
        found = shutil.which("lxc-attach")
        if not found:
            raise AnsibleConnectionFailure(
                "specops.lab.container: lxc-attach not found (scripts/setup.sh installs lxc)"
            )
        self._lxc_attach = found
        name, lxcpath = self._name(), str(self.get_option("lxcpath"))
        state = subprocess.run(
            ["lxc-info", "-P", lxcpath, "-n", name, "-s", "-H"],
            capture_output=True,
            text=True,
            check=False,
        )
        if state.returncode != 0 or state.stdout.strip() != "RUNNING":
            raise AnsibleConnectionFailure(
                f"specops.lab.container: container {name} under {lxcpath} is not running "
                f"({(state.stdout or state.stderr).strip() or 'unknown'})"
            )
        self._display.vvv(f"LXC-ATTACH into {name} ({lxcpath})", host=name)
        super()._connect()
        self._connected = True
        return self

    def exec_command(
        self, cmd: str, in_data: bytes | None = None, sudoable: bool = True
    ) -> tuple[int, bytes, bytes]:
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        argv = self._argv([str(self.get_option("executable")), "-c", cmd])
        self._display.vvv(f"EXEC {shlex.join(argv)}", host=self._name())
        proc = subprocess.run(argv, input=in_data or b"", capture_output=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        self._display.vvv(f"PUT {in_path} TO {out_path}", host=self._name())
        if not os.path.isfile(in_path):
            raise AnsibleFileNotFound(f"specops.lab.container: no file {in_path}")
        with open(in_path, "rb") as src:
            proc = subprocess.run(
                self._argv(["/bin/sh", "-c", f"cat > {shlex.quote(out_path)}"]),
                stdin=src,
                capture_output=True,
                check=False,
            )
        if proc.returncode != 0:
            raise AnsibleError(
                f"specops.lab.container: copying {in_path} to {self._name()}:{out_path} "
                f"failed: {proc.stderr.decode(errors='replace').strip()}"
            )

    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        self._display.vvv(f"FETCH {in_path} TO {out_path}", host=self._name())
        with open(out_path, "wb") as dst:
            # Straight into the file: no copy of it in memory.
            proc = subprocess.run(
                self._argv(["/bin/cat", "--", in_path]),
                stdout=dst,
                stderr=subprocess.PIPE,
                check=False,
            )
        rc, err = proc.returncode, proc.stderr
        if rc != 0:
            os.unlink(out_path)
            raise AnsibleError(
                f"specops.lab.container: fetching {self._name()}:{in_path} failed: "
                f"{err.decode(errors='replace').strip()}"
            )

    def close(self) -> None:
        super().close()
        self._connected = False

    def reset(self) -> Any:
        # Nothing persistent to reconnect: every command is its own attach.
        self.close()
        return None
