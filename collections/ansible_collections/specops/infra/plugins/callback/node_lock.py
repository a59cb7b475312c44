"""Callback plugin: a run that ends releases the node locks it holds, before it exits."""

from __future__ import annotations

DOCUMENTATION = r"""
name: node_lock
type: aggregate
short_description: Release the node locks of a run when it ends
description:
  - The node lock (C(specops.infra.node_lock)) is a lease a run's renewers keep while the
    run lives. When the run ends in order - done, failed, or interrupted with Ctrl-C -
    this callback marks the run's directory and waits until every renewer has released
    its node's lock, so the next run finds the nodes free.
  - Without it a run's locks are not released at its end; each lease runs out after
    C(node_lock_lease) seconds (a run from the same controller takes them over at once,
    seeing the run gone). Enable it in C(ansible.cfg) - C(callbacks_enabled =
    specops.infra.node_lock), as this repository's does.
version_added: "0.2.0"
author: specops maintainers (!UNKNOWN)
requirements:
  - enabled in callbacks_enabled
options:
  release_timeout:
    description: Seconds to wait for the renewers to release the locks.
    type: float
    default: 60
    env:
      - name: SPECOPS_NODE_LOCK_RELEASE_TIMEOUT
"""

import atexit
import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible_collections.specops.infra.plugins.plugin_utils.node_lock_run import (
    ENDED,
    mark_ended,
    process_start,
    renewer_pids,
    run_dir,
    wait_renewers,
)


def _remove_unless_failed(directory: Path) -> None:
    """The run's directory goes, unless a renewer's log there says what went wrong."""
    for log in directory.glob("renewer-*.log"):
        with contextlib.suppress(OSError):
            text = log.read_text(encoding="utf-8")
            if "Traceback" in text or "failed" in text:
                return
    shutil.rmtree(directory, ignore_errors=True)


class CallbackModule(CallbackBase):  # type: ignore[misc]  # ansible is untyped
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "specops.infra.node_lock"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pid = os.getpid()
        atexit.register(self._exit)

    def _exit(self) -> None:
        self._end()
        if os.getpid() == self._pid:
            directory = run_dir(self._pid, process_start(self._pid))
            if not renewer_pids(directory):
                _remove_unless_failed(directory)

    def _end(self) -> None:
        """After each playbook of the run and at its exit: release what it holds."""
        if os.getpid() != self._pid:
            return  # only in the run's own process (never in a worker)
        directory = run_dir(self._pid, process_start(self._pid))
        if not renewer_pids(directory):
            return
        mark_ended(directory)
        try:
            timeout = float(self.get_option("release_timeout"))
        except (KeyError, TypeError, ValueError):
            timeout = 60.0
        left = wait_renewers(directory, timeout)
        # the next playbook of the same command line takes its locks anew
        (directory / ENDED).unlink(missing_ok=True)
        if left:
            self._display.warning(
                "node lock: not released within "
                f"{timeout:g} s on {', '.join(sorted(left))}: their leases run out"
            )

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._end()
