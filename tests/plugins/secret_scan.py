"""Watch every process's command line for a secret while a block of a test runs.

``with CmdlineScan(secret, markers=("migrate preflight",)) as scan: run(...)`` reads
``/proc/*/cmdline`` of every process of this machine in a background thread (every few
milliseconds) for as long as the block runs. ``scan.hits`` lists each process whose
command line held the secret (what any local user could have read there);
``scan.seen`` counts, per marker, the scans that saw a process whose command line held
it, so a test proves the scan ran while the interesting processes lived.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import TracebackType

__all__ = ["CmdlineScan"]


class CmdlineScan:
    def __init__(
        self, secret: str, *, markers: tuple[str, ...] = (), interval: float = 0.003
    ) -> None:
        if len(secret) < 8:
            raise ValueError("use a distinctive test secret (8+ characters)")
        self.secret = secret.encode()
        self.markers = {m: m.encode() for m in markers}
        self.interval = interval
        self.hits: list[str] = []
        self.seen: dict[str, int] = dict.fromkeys(markers, 0)
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _scan_once(self) -> None:
        found: dict[str, bool] = dict.fromkeys(self.markers, False)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                raw = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if self.secret in raw:
                shown = raw.replace(b"\0", b" ").decode("utf-8", "replace")
                self.hits.append(f"pid {entry.name}: {shown[:300]}")
            for name, marker in self.markers.items():
                if marker in raw:
                    found[name] = True
        for name, hit in found.items():
            self.seen[name] += int(hit)
        self.scans += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._scan_once()
            time.sleep(self.interval)

    def __enter__(self) -> CmdlineScan:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
