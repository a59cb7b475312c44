"""Action plugin: the controller's half of the node lock (the module does the node's).

``state: acquired`` (the default): asks the node for its lock as this run (holder:
controller host, user, ``ansible-playbook``'s pid and start, the playbooks), first
without waiting. Another run holds it:

- gone from this controller (its process dead): taken over at once, with a warning
  naming it;
- else: a warning names the holder, and the node is asked again every
  ``poll_step`` seconds up to ``wait`` seconds (a lease that runs out meanwhile is
  taken over, with a warning), then the task fails naming the holder.

Once taken, a lease renewer keeps the lock while the run lives: a process forked from
this worker, holding the task's connection to the node, that renews the lease every
fifth of it and, when the run ends in order (the ``node_lock`` callback marks the run
directory), releases the lock. When the run's process is gone without that mark (a
killed controller) it stops renewing and releases nothing: the lease runs out, and a
run from this controller takes the lock over at once.

``state: released`` releases this run's lock now (its renewer then stops by itself);
``state: query`` (and every state in check mode) only reads who holds the lock and
warns when another run holds it. The task never reports ``changed``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible import context
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.specops.infra.plugins.plugin_utils.node_lock_run import (
    ENDED,
    RunIdentity,
    holder_gone,
    process_alive,
    run_dir,
    run_identity,
)

display = Display()

MODULE = "specops.infra.node_lock"
_ARGS = frozenset(("state", "root", "node", "wait", "lease", "poll_step"))


def _describe(holder: Mapping[str, Any]) -> str:
    who = f"{holder.get('user') or '?'}@{holder.get('controller') or '?'}"
    return f"{who} ({holder.get('playbook') or '?'}, pid {holder.get('pid') or '?'})"


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible is untyped
    TRANSFERS_FILES = False
    _VALID_ARGS = _ARGS

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        state = str(args.get("state", "acquired"))
        if state not in ("acquired", "released", "query"):
            raise AnsibleActionFail(f"state: {state!r}; valid: acquired, released, query")
        node = str(args.get("node") or task_vars.get("inventory_hostname") or "?")
        root = str(args.get("root") or "/")
        wait = float(args.get("wait", 600))
        lease = float(args.get("lease", 300))
        step = max(float(args.get("poll_step", 15)), 1.0)
        if lease < 5:
            raise AnsibleActionFail(f"lease: {lease:g} s is too short (at least 5 s)")
        args_ = context.CLIARGS.get("args") or []  # the playbooks (ad-hoc: a host pattern)
        playbooks = list(args_) if not isinstance(args_, str) else ["ad-hoc"]
        me = run_identity(os.getppid(), playbooks)
        job = task_vars.get("awx_job_id") or task_vars.get("tower_job_id")
        holder = me.holder(job=job)
        result.update(changed=False, node=node, holder=holder)

        if state == "query" or self._task.check_mode:
            found = self._node(task_vars, state="query", root=root)
            return self._report(result, found, node, me, state)
        if state == "released":
            out = self._node(task_vars, state="released", root=root, holder=holder)
            result.update(out, changed=False)
            return result
        return self._acquire(result, task_vars, node=node, root=root, holder=holder,
                             me=me, wait=wait, lease=lease, step=step)  # fmt: skip

    # -- the node ---------------------------------------------------------------------

    def _node(
        self, task_vars: dict[str, Any], *, fresh_tmp: bool = False, **module_args: Any
    ) -> dict[str, Any]:
        if fresh_tmp:
            # the renewer: the task's remote temporary directory went with the task (a
            # connection without pipelining makes one per call, and removes it after)
            self._connection._shell.tmpdir = None
        out: dict[str, Any] = self._execute_module(
            module_name=MODULE, module_args=module_args, task_vars=task_vars
        )
        return dict(out)

    def _report(
        self, result: dict[str, Any], found: Mapping[str, Any], node: str, me: RunIdentity,
        state: str,
    ) -> dict[str, Any]:  # fmt: skip
        if found.get("failed"):
            result.update(failed=True, msg=f"{node}: {found.get('msg')}")
            return result
        record = dict(found.get("record") or {})
        holder = dict(record.get("holder") or {})
        ours = holder.get("id") == me.id
        result.update(
            held=bool(found.get("held")), held_by_this_run=ours and bool(found.get("held")),
            record=record, message=found.get("message", ""),
        )  # fmt: skip
        if found.get("held") and not ours:
            what = "a check run takes no lock" if state != "query" else "read only"
            display.warning(f"node lock: {node} is {found.get('message')} ({what})")
        return result

    def _acquire(
        self, result: dict[str, Any], task_vars: dict[str, Any], *, node: str, root: str,
        holder: dict[str, Any], me: RunIdentity, wait: float, lease: float, step: float,
    ) -> dict[str, Any]:  # fmt: skip
        start = time.monotonic()
        said = False
        take_over: str | None = None
        while True:
            waited = time.monotonic() - start
            chunk = 0.0 if not said else min(step, max(wait - waited, 0.0))
            out = self._node(
                task_vars, state="acquired", root=root, holder=holder, lease=lease,
                wait=chunk, take_over_from=take_over,
            )  # fmt: skip
            if not out.get("failed"):
                break
            if not out.get("busy"):
                result.update(failed=True, msg=f"node lock of {node}: {out.get('msg')}")
                return result
            current = dict((out.get("record") or {}).get("holder") or {})
            if holder_gone(current) and take_over != current.get("id"):
                take_over = str(current.get("id"))
                continue  # its process is gone from this controller: take it over now
            waited = time.monotonic() - start
            if waited >= wait:
                result.update(
                    failed=True, busy=True, record=out.get("record"),
                    msg=(
                        f"{node} is locked by another specops run: {out.get('msg')}. Gave up"
                        f" after {waited:.0f} s (node_lock_wait): that run changes this node"
                        " now; run again when it is done, or wait longer."
                    ),
                )  # fmt: skip
                return result
            if not said:
                display.warning(
                    f"node lock: {node} is held by {_describe(current)} since "
                    f"{(out.get('record') or {}).get('since')}; waiting up to {wait:g} s"
                )
                said = True
        taken = out.get("taken_over")
        if taken:
            display.warning(f"node lock: {node}: {out.get('message')}")
        result.update(
            held=True, acquired_now=bool(out.get("acquired_now")), taken_over=taken,
            message=out.get("message", ""), record=out.get("record"),
            waited_s=round(time.monotonic() - start, 1),
        )  # fmt: skip
        if out.get("acquired_now"):
            result["renewer"] = self._start_renewer(
                task_vars, node=node, root=root, holder=holder, me=me, lease=lease
            )
        return result

    # -- the lease renewer ----------------------------------------------------------------

    def _start_renewer(
        self, task_vars: dict[str, Any], *, node: str, root: str, holder: dict[str, Any],
        me: RunIdentity, lease: float,
    ) -> int:  # fmt: skip
        directory = run_dir(me.pid, me.pid_start)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node)
        pidfile = directory / f"renewer-{safe}.pid"
        pid = os.fork()
        if pid:
            return pid
        # The child: never returns into Ansible's code (os._exit), touches neither the
        # worker's result queue nor Display (the run may have ended: nobody reads it).
        code = 0
        log = directory / f"renewer-{safe}.log"
        try:
            display._final_q = None  # the worker's queue to the run: not this process's
            for sig in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            pidfile.write_text(str(os.getpid()), encoding="ascii")
            self._renew_loop(task_vars, directory, root=root, holder=holder, me=me, lease=lease,
                             log=log)  # fmt: skip
        except BaseException:  # a child of a worker ends here, whatever happened
            code = 1
            with contextlib.suppress(OSError), log.open("a", encoding="utf-8") as fh:
                fh.write(traceback.format_exc())
        finally:
            with contextlib.suppress(OSError):
                pidfile.unlink()
        os._exit(code)

    def _renew_loop(
        self, task_vars: dict[str, Any], directory: Path, *, root: str,
        holder: dict[str, Any], me: RunIdentity, lease: float, log: Path,
    ) -> None:  # fmt: skip
        every = min(max(lease / 5.0, 1.0), 60.0)
        due = time.monotonic() + every

        def note(text: str) -> None:
            with contextlib.suppress(OSError), log.open("a", encoding="utf-8") as fh:
                fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")

        while True:
            if (directory / ENDED).exists():
                out = self._node(
                    task_vars, fresh_tmp=True, state="released", root=root, holder=holder
                )
                note(f"run ended: {out.get('message') or out.get('msg')}")
                return
            if not process_alive(me.pid, me.pid_start):
                note("run gone without ending (killed?): the lease is left to run out")
                return
            if time.monotonic() >= due:
                out = self._node(task_vars, fresh_tmp=True, state="renewed", root=root,
                                 holder=holder, lease=lease)  # fmt: skip
                if out.get("failed"):
                    note(f"renewal failed: {out.get('msg')}")
                    if out.get("record") and "no longer" in str(out.get("msg")):
                        return  # released, or taken over: nothing left to renew
                    due = time.monotonic() + min(every, 5.0)
                else:
                    due = time.monotonic() + every
            time.sleep(0.25)
