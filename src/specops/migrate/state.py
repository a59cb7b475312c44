"""A state file per migration (``<state_dir>/migrate-<vmid>.json``): what each phase
found and did, with timings, so a re-run continues where the last one stopped."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MigrationState", "load_state"]

STATE_VERSION = 1


@dataclass
class MigrationState:
    path: Path
    vmid: int
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def phases(self) -> dict[str, dict[str, Any]]:
        phases: dict[str, dict[str, Any]] = self.data.setdefault("phases", {})
        return phases

    def phase(self, name: str) -> dict[str, Any]:
        return self.phases.setdefault(name, {})

    def done(self, name: str) -> bool:
        return self.phases.get(name, {}).get("status") == "done"

    def save(self) -> None:
        self.data["version"] = STATE_VERSION
        self.data["vmid"] = self.vmid
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[dict[str, Any]]:
        """Run a phase: status running -> done (or failed with the error), seconds kept."""
        entry = self.phase(name)
        entry.update(status="running", started=time.time())
        entry.pop("error", None)
        self.save()
        start = time.monotonic()
        try:
            yield entry
        except BaseException as exc:
            entry.update(
                status="failed", error=str(exc), seconds=round(time.monotonic() - start, 2)
            )
            self.save()
            raise
        entry.update(status="done", seconds=round(time.monotonic() - start, 2), ended=time.time())
        self.save()

    def record(self, name: str, seconds: float, **info: Any) -> None:
        """A phase run elsewhere (the playbook's roles): its time and what it reported."""
        entry = self.phase(name)
        entry.update(status="done", seconds=round(seconds, 2), ended=time.time(), **info)
        self.save()


def load_state(state_dir: Path, vmid: int) -> MigrationState:
    path = state_dir / f"migrate-{vmid}.json"
    data: dict[str, Any] = {}
    if path.exists():
        data = json.loads(path.read_text())
    return MigrationState(path=path, vmid=vmid, data=data)
