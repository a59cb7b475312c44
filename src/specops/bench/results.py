"""The versioned results document: plan, server identity, cells, raw requests.

Everything a report, a comparison, a sweep or a rollout gate shows is read from this
document; nothing re-measures. ``SCHEMA_VERSION`` changes whenever a field changes
meaning or disappears; readers refuse versions they do not know.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.bench.client import RequestRecord
from specops.bench.metrics import Acceptance
from specops.bench.stats import CellStats, itl_values, tpot_s
from specops.errors import ValidationError

__all__ = [
    "SCHEMA_VERSION",
    "Cell",
    "Results",
    "ServerIdentity",
    "cells_csv",
    "load_results",
    "requests_csv",
]

SCHEMA_VERSION = 1


@dataclass
class ServerIdentity:
    base_url: str
    model: str
    engine: str  # "vllm", "sglang" or "unknown"
    engine_version: str | None
    max_model_len: int | None
    speculative: dict[str, Any] | None  # as read back from the server, when exposed
    speculative_source: str  # where ``speculative`` came from, or why it is absent
    spec_counters: bool  # /metrics exports spec_decode counters

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Cell:
    concurrency: int
    context_tokens: int
    status: str  # "ok", "partial" (some requests failed) or "failed" (none completed)
    stats: CellStats
    acceptance: Acceptance
    warmup_requests: int
    warmup_failed: int
    started_at: str
    records: list[RequestRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "context_tokens": self.context_tokens,
            "status": self.status,
            "stats": self.stats.to_dict(),
            "acceptance": self.acceptance.to_dict(),
            "warmup_requests": self.warmup_requests,
            "warmup_failed": self.warmup_failed,
            "started_at": self.started_at,
            "notes": self.notes,
            "records": [r.to_dict() for r in self.records],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cell:
        return cls(
            concurrency=int(data["concurrency"]),
            context_tokens=int(data["context_tokens"]),
            status=str(data["status"]),
            stats=CellStats.from_dict(data["stats"]),
            acceptance=Acceptance.from_dict(data["acceptance"]),
            warmup_requests=int(data["warmup_requests"]),
            warmup_failed=int(data["warmup_failed"]),
            started_at=str(data["started_at"]),
            records=[RequestRecord.from_dict(r) for r in data["records"]],
            notes=list(data.get("notes", [])),
        )


@dataclass
class Results:
    run_id: str
    created_at: str
    finished_at: str | None
    host: dict[str, str]
    plan: dict[str, Any]
    server: ServerIdentity
    cells: list[Cell]
    notes: list[str] = field(default_factory=list)
    correctness: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def failed_cells(self) -> list[Cell]:
        return [c for c in self.cells if c.status != "ok"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "host": self.host,
            "plan": self.plan,
            "server": self.server.to_dict(),
            "notes": self.notes,
            "correctness": self.correctness,
            "cells": [c.to_dict() for c in self.cells],
        }

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), separators=(",", ":")) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValidationError(
                "schema_version",
                f"results schema {version!r} is not supported (this specops reads "
                f"{SCHEMA_VERSION})",
            )
        return cls(
            run_id=str(data["run_id"]),
            created_at=str(data["created_at"]),
            finished_at=data.get("finished_at"),
            host=dict(data["host"]),
            plan=dict(data["plan"]),
            server=ServerIdentity(**data["server"]),
            cells=[Cell.from_dict(c) for c in data["cells"]],
            notes=list(data.get("notes", [])),
            correctness=data.get("correctness"),
        )


def load_results(path: str | Path) -> Results:
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValidationError("results", f"cannot read {file}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValidationError("results", f"{file} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValidationError("results", f"{file} does not hold a results object")
    try:
        return Results.from_dict(data)
    except (KeyError, TypeError) as exc:
        raise ValidationError("results", f"{file} is missing or has a bad field: {exc}") from None


_CELL_COLUMNS = (
    "concurrency",
    "context_tokens",
    "status",
    "requests",
    "completed",
    "failed",
    "duration_s",
    "total_output_tokens",
    "output_tok_s",
    "request_rate",
    "goodput_req_s",
    "ttft_ms_p50",
    "ttft_ms_p90",
    "ttft_ms_p99",
    "ttft_ms_mean",
    "tpot_ms_p50",
    "tpot_ms_p90",
    "tpot_ms_p99",
    "tpot_ms_mean",
    "itl_ms_p50",
    "itl_ms_p90",
    "itl_ms_p99",
    "itl_ms_mean",
    "e2e_ms_p50",
    "e2e_ms_p90",
    "e2e_ms_p99",
    "e2e_ms_mean",
    "decode_tok_s_p50",
    "decode_tok_s_mean",
    "mean_acceptance_length",
    "draft_acceptance_rate",
)


def cells_csv(results: Results) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_CELL_COLUMNS)
    for cell in results.cells:
        s = cell.stats
        row: list[object] = [
            cell.concurrency,
            cell.context_tokens,
            cell.status,
            s.requests,
            s.completed,
            s.failed,
            s.duration_s,
            s.total_output_tokens,
            s.output_tok_s,
            s.request_rate,
            s.goodput_req_s,
        ]
        for dist in (s.ttft_ms, s.tpot_ms, s.itl_ms, s.e2e_ms):
            row.extend([dist.p50, dist.p90, dist.p99, dist.mean])
        row.extend([s.decode_tok_s.p50, s.decode_tok_s.mean])
        row.extend([cell.acceptance.mean_acceptance_length, cell.acceptance.draft_acceptance_rate])
        writer.writerow(["" if v is None else v for v in row])
    return out.getvalue()


def requests_csv(results: Results) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "concurrency",
            "context_tokens",
            "index",
            "t_sent",
            "ttft_s",
            "e2e_s",
            "tpot_s",
            "output_tokens",
            "prompt_tokens",
            "chunks",
            "itl_count",
            "finish_reason",
            "error",
        ]
    )
    for cell in results.cells:
        for r in cell.records:
            row: list[object] = [
                cell.concurrency,
                cell.context_tokens,
                r.index,
                r.t_sent,
                r.ttft_s,
                r.e2e_s,
                tpot_s(r),
                r.output_tokens,
                r.prompt_tokens,
                len(r.chunk_times),
                len(itl_values(r)),
                r.finish_reason,
                r.error,
            ]
            writer.writerow(["" if v is None else v for v in row])
    return out.getvalue()
