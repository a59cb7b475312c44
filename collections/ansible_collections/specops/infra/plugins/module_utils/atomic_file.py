"""Replace a file atomically: a temporary file beside it, fsync, rename over it.

One home for the write every file-changing module does (PVE container confs, systemd
units). Stdlib only (it runs on the managed host).
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["write_atomic"]


def write_atomic(path: str, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never half.

    ``mode``: the new file's permissions; None keeps the old file's (a new file gets
    0640), and a file system that refuses chmod (pmxcfs has fixed modes) is accepted.
    """
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640 if mode is None else mode)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        else:
            with contextlib.suppress(OSError):
                os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
