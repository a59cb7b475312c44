"""An exclusive ``flock`` taken within a time limit, as PVE's ``lock_file_full`` takes it.

One home for the per-guest locks that specops holds beside PVE (the container config
lock, the VM lock): the lock file is opened for append (created, with its folder, when
missing), ``LOCK_EX | LOCK_NB`` is retried until it is had or ``timeout`` seconds
passed, and released when the block ends. Stdlib only (it runs on the managed host);
the lab's PVE stand-in takes the same locks through it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator

__all__ = ["LockTimeout", "flock_within"]


class LockTimeout(TimeoutError):
    """The lock stayed taken for the whole time limit (PVE's words: "can't lock file
    '<path>' - got timeout")."""


def _pve_words(path: str) -> Exception:
    return LockTimeout(f"can't lock file '{path}' - got timeout")


@contextlib.contextmanager
def flock_within(
    path: str | os.PathLike[str],
    timeout: float,
    *,
    poll: float = 0.1,
    error: Callable[[str], Exception] = _pve_words,
) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` while the block runs.

    Raises ``error(path)`` (by default :class:`LockTimeout` in PVE's words) when the lock
    cannot be had within ``timeout`` seconds; nothing of the block has run then.
    """
    name = os.fspath(path)
    os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
    with open(name, "a") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise error(name) from None
                time.sleep(poll)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
