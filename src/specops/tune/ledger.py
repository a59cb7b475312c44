"""The sweep's results file (JSON Lines): what makes a sweep resumable.

Line 1 is a header with the sweep's fingerprint (base profile, space, engine, plan,
scoring, mode); every later line is one event: ``invalid`` (a candidate the engine
rejects, never started), ``run`` (one benchmark of a candidate, with its objective,
verdict, its acceptance per draft position when it drafted (``per_position``, absent in
older ledgers: read as none), the bench results file it was read from and the restart
that preceded it),
``final`` (the pick and where the canary was left). An interrupted sweep is re-run
with the same file: recorded runs are read back instead of measured again, so the
deterministic search walks the same path and only what is missing is measured.
A file from a different sweep is refused.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.errors import ValidationError
from specops.tune.search import Measurement

__all__ = ["Ledger", "RunRecord"]


@dataclass(frozen=True)
class RunRecord:
    key: str
    repeat: int
    measurement: Measurement
    results: str | None
    restart: dict[str, Any] | None


class Ledger:
    def __init__(self, path: Path, fingerprint: dict[str, Any]) -> None:
        self.path = path
        # as the header reads back: JSON has no tuples (a config's tuple of prompts is
        # a list after a round trip, and a resumed sweep must match its own header)
        self.fingerprint = json.loads(json.dumps(fingerprint))
        self.runs: dict[tuple[str, int], RunRecord] = {}
        self.invalid: dict[str, str] = {}
        self.events: list[dict[str, Any]] = []
        self.resumed = False
        if path.exists() and path.stat().st_size > 0:
            self._load()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._write({"kind": "header", "fingerprint": fingerprint, "created_at": _now()})

    def _load(self) -> None:
        lines = self.path.read_text(encoding="utf-8").splitlines()
        try:
            header = json.loads(lines[0])
        except (json.JSONDecodeError, IndexError):
            raise ValidationError("results", f"{self.path} is not a sweep results file") from None
        if header.get("kind") != "header" or header.get("fingerprint") != self.fingerprint:
            raise ValidationError(
                "results",
                f"{self.path} belongs to a different sweep (base profile, space, plan, scoring"
                " or mode changed); use another --out directory or restore the config",
            )
        self.resumed = True
        for n, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                if n == len(lines):  # a line cut by the interruption: measured again
                    break
                raise ValidationError("results", f"{self.path}:{n} is not JSON") from None
            self._index(event)

    def _index(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if event["kind"] == "invalid":
            self.invalid[event["key"]] = event["reason"]
        elif event["kind"] == "run":
            m = Measurement(
                float(event["objective"]),
                float(event["tiebreak"]),
                bool(event["ok"]),
                str(event.get("reason", "")),
                tuple(float(x) for x in event.get("per_position") or ()),
            )
            self.runs[(event["key"], int(event["repeat"]))] = RunRecord(
                event["key"], int(event["repeat"]), m, event.get("results"), event.get("restart")
            )

    def _write(self, event: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(event, sort_keys=True) + "\n")
            fh.flush()

    def record(self, event: dict[str, Any]) -> None:
        event = {"at": _now(), **event}
        self._write(event)
        self._index(event)

    def run(self, key: str, repeat: int) -> RunRecord | None:
        return self.runs.get((key, repeat))

    @property
    def restarts(self) -> int:
        return sum(1 for r in self.runs.values() if r.restart and r.restart.get("restarted"))


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
