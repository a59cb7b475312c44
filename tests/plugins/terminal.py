"""Child processes that take Ctrl-C as they would from an operator's terminal.

A shell without job control starts background commands with SIGINT ignored, and a
Python started with SIGINT ignored installs no KeyboardInterrupt handler (nor does
asyncio's runner): under a test run launched that way (a CI lane, ``nohup ... &``) a
test's SIGINT would go nowhere. :func:`python_module_argv` starts the module with the
default handler back, as a foreground job in an interactive terminal has it (a
``preexec_fn`` would do it too, but is unsafe beside the tests' server threads).
"""

from __future__ import annotations

import sys

_BOOT = (
    "import runpy, signal, sys; "
    "signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = sys.argv[1]; del sys.argv[1]; "
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)


def python_module_argv(module: str, *args: str) -> list[str]:
    """``python -m module args`` with SIGINT raising KeyboardInterrupt in the child."""
    return [sys.executable, "-c", _BOOT, module, *args]
