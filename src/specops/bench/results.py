"""The versioned results document: plan, server identity, cells, raw requests.

Everything a report, a comparison, a sweep or a rollout gate shows is read from this
document; nothing re-measures. ``SCHEMA_VERSION`` changes whenever a field changes
meaning or disappears; readers refuse versions they do not know and read older ones
they do, a field newer than the file taking its documented default (schema 2 added
per cell ``concurrency_max``, ``concurrency_mean``, ``steady_s``,
``steady_output_tok_s`` (None when read from schema 1), per request
``in_flight_at_send`` (None), per run ``interrupted`` (false) and ``resumed_at`` ([]));
later schema-2 files may carry ``server_instance`` (None when absent: the caller named no
server process, so the run never stands for another, see :mod:`specops.bench.reuse`) and
``warmup`` (the warm-up over the plan's cells before the first measured one: waves,
requests, failed, seconds; None when absent: the run warmed only each cell's own
``warmup_per_cell`` requests, as every run before it did), the server's ``capacity``
(None when absent) and per cell ``server`` (the server's view: queue, running, KV-cache
usage, preemptions, GPU power and utilisation; None when absent: not sampled).

A run directory (:class:`RunStore`) holds the document while it grows: ``run.json``
(everything but the cells, written once), ``cells.jsonl`` (one finished cell per line,
appended and flushed as the cell ends) and ``results.json`` (the whole document,
written when the run ends or is interrupted). A run killed at any point keeps every
cell that had finished; ``--resume`` reads them back and measures only the rest.

Columns of the CSV files and the report's tables are keyed (:data:`CELL_COLUMNS`,
:func:`cell_row`): the CSV header, the Markdown template and the plots read the same
keys, never positions.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from specops.bench.client import RequestRecord
from specops.bench.metrics import Acceptance
from specops.bench.stats import CellStats, itl_values, tpot_s
from specops.errors import ValidationError

__all__ = [
    "CELL_COLUMNS",
    "REQUEST_COLUMNS",
    "SCHEMA_VERSION",
    "SERVER_KEYS",
    "Cell",
    "Column",
    "Results",
    "RunStore",
    "ServerIdentity",
    "cell_row",
    "cells_csv",
    "columns_csv",
    "load_results",
    "request_row",
    "requests_csv",
]

SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)


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
    # What the server says it can hold (engines.ENGINES' capacity fields): the most
    # requests it runs at once and the KV-cache tokens; None when it says nothing (and
    # in results before the field).
    capacity: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerIdentity:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


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
    # The server's view over the measured phase (bench.serverview.summarize): queue,
    # running, KV usage, preemptions, GPU power; None when not sampled (older results).
    server: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
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
            server=data.get("server"),
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
    interrupted: bool = False  # stopped before the matrix was done (Ctrl-C, SIGTERM)
    resumed_at: list[str] = field(default_factory=list)  # when --resume continued it
    # The serving process measured, as the caller named it (systemd InvocationID): what
    # `bench run --reuse` compares. None: not named.
    server_instance: str | None = None
    # The warm-up over every cell of the plan before the first measured one (None: none
    # recorded; older results): {"waves", "cells", "requests", "failed", "seconds", "error"}.
    warmup: dict[str, Any] | None = None

    @property
    def failed_cells(self) -> list[Cell]:
        return [c for c in self.cells if c.status != "ok"]

    def header(self) -> dict[str, Any]:
        """Everything but the cells (``run.json`` of a run directory)."""
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
            "interrupted": self.interrupted,
            "resumed_at": self.resumed_at,
            "server_instance": self.server_instance,
            "warmup": self.warmup,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.header(), "cells": [c.to_dict() for c in self.cells]}

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, _dumps(self.to_dict()) + b"\n")
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        version = data.get("schema_version")
        if version not in READABLE_SCHEMAS:
            raise ValidationError(
                "schema_version",
                f"results schema {version!r} is not supported (this specops reads "
                f"{', '.join(str(v) for v in READABLE_SCHEMAS)})",
            )
        return cls(
            run_id=str(data["run_id"]),
            created_at=str(data["created_at"]),
            finished_at=data.get("finished_at"),
            host=dict(data["host"]),
            plan=dict(data["plan"]),
            server=ServerIdentity.from_dict(data["server"]),
            cells=[Cell.from_dict(c) for c in data["cells"]],
            notes=list(data.get("notes", [])),
            correctness=data.get("correctness"),
            schema_version=SCHEMA_VERSION,
            interrupted=bool(data.get("interrupted", False)),
            resumed_at=list(data.get("resumed_at", [])),
            server_instance=data.get("server_instance"),
            warmup=data.get("warmup"),
        )


def _dumps(data: Any, indent: bool = False) -> bytes:
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    return orjson.dumps(data, option=option)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


class RunStore:
    """A run directory that keeps every finished cell (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.header_path = directory / "run.json"
        self.cells_path = directory / "cells.jsonl"
        self.results_path = directory / "results.json"

    def exists(self) -> bool:
        return self.header_path.is_file()

    def start(self, results: Results) -> None:
        """A new run: its header, no cells yet."""
        self.dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.header_path, _dumps(results.header(), indent=True))
        self.cells_path.write_bytes(b"")

    def add(self, cell: Cell) -> None:
        """Append one finished cell, on disk before this returns."""
        with self.cells_path.open("ab") as fh:
            fh.write(_dumps(cell.to_dict()) + b"\n")
            fh.flush()
            os.fsync(fh.fileno())

    def load(self) -> Results:
        """The run as far as it got: the header and every complete cell line."""
        try:
            header = orjson.loads(self.header_path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ValidationError(
                "resume", f"{self.header_path} is not a run header: {exc}"
            ) from None
        cells: list[dict[str, Any]] = []
        lines = self.cells_path.read_bytes().split(b"\n") if self.cells_path.exists() else []
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                cells.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                if n == len(lines):  # the line a kill cut short: that cell is measured again
                    break
                raise ValidationError("resume", f"{self.cells_path}:{n} is not JSON") from None
        try:
            return Results.from_dict({**header, "cells": cells})
        except (KeyError, TypeError) as exc:
            raise ValidationError("resume", f"{self.dir}: missing or bad field {exc}") from None

    def rewrite_cells(self, cells: list[Cell]) -> None:
        """Drop a cut-short last line: the file holds exactly ``cells`` again."""
        _write_atomic(self.cells_path, b"".join(_dumps(c.to_dict()) + b"\n" for c in cells))

    def update_header(self, results: Results) -> None:
        _write_atomic(self.header_path, _dumps(results.header(), indent=True))

    def finish(self, results: Results) -> Path:
        self.update_header(results)
        return results.save(self.results_path)


def load_results(path: str | Path) -> Results:
    file = Path(path)
    try:
        data = orjson.loads(file.read_bytes())
    except OSError as exc:
        raise ValidationError("results", f"cannot read {file}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ValidationError("results", f"{file} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValidationError("results", f"{file} does not hold a results object")
    try:
        return Results.from_dict(data)
    except (KeyError, TypeError) as exc:
        raise ValidationError("results", f"{file} is missing or has a bad field: {exc}") from None


@dataclass(frozen=True)
class Column:
    """One keyed column: the CSV header is ``key``; reports show ``header``."""

    key: str
    header: str
    digits: int = 1  # decimals a report shows
    description: str = ""


def _dist_columns(name: str, label: str, digits: int) -> tuple[Column, ...]:
    return tuple(
        Column(f"{name}_{q}", f"{label} {q}", digits) for q in ("p50", "p90", "p99", "mean")
    )


CELL_COLUMNS: tuple[Column, ...] = (
    Column("concurrency", "C", 0, "requests the cell keeps in flight"),
    Column("context_tokens", "context", 0, "input tokens per request"),
    Column("status", "status"),
    Column("requests", "requests", 0),
    Column("completed", "ok", 0),
    Column("failed", "failed", 0),
    Column("concurrency_max", "max in flight", 0, "most requests in flight at once"),
    Column("concurrency_mean", "mean in flight", 1, "time-weighted over the measured span"),
    Column("duration_s", "duration s", 2),
    Column("total_output_tokens", "output tokens", 0),
    Column("output_tok_s", "out tok/s", 1, "output tokens / measured wall time"),
    Column("steady_output_tok_s", "steady tok/s", 1, "output tok/s while all C in flight"),
    Column("steady_s", "steady s", 2),
    Column("request_rate", "req/s", 2),
    Column("goodput_req_s", "goodput req/s", 2),
    *_dist_columns("ttft_ms", "TTFT", 1),
    *_dist_columns("tpot_ms", "TPOT", 2),
    *_dist_columns("itl_ms", "ITL", 2),
    *_dist_columns("e2e_ms", "E2E", 1),
    Column("decode_tok_s_p50", "decode tok/s p50", 1),
    Column("decode_tok_s_mean", "decode tok/s mean", 1),
    Column("mean_acceptance_length", "accept len", 3),
    Column("draft_acceptance_rate", "draft accept rate", 3),
    # The server's view (Cell.server): its own metrics sampled during the cell.
    Column("queued_max", "queued max", 0, "most requests waiting in the server's queue"),
    Column("queued_mean", "queued mean", 1),
    Column("running_max", "running max", 0, "most requests the server ran at once"),
    Column("kv_usage_max", "KV usage max", 3, "fraction of the KV cache in use, at most"),
    Column("kv_usage_mean", "KV usage mean", 3),
    Column("preemptions", "preemptions", 0, "requests preempted or retracted in the cell"),
    Column("gpu_power_w_mean", "GPU W mean", 0, "summed over the cards nvidia-smi sees"),
    Column("gpu_power_w_max", "GPU W max", 0),
    Column("gpu_util_pct_mean", "GPU util %", 0),
)
SERVER_KEYS: tuple[str, ...] = (
    "queued_max", "queued_mean", "running_max", "kv_usage_max", "kv_usage_mean",
    "preemptions", "gpu_power_w_mean", "gpu_power_w_max", "gpu_util_pct_mean",
)  # fmt: skip


def cell_row(cell: Cell) -> dict[str, Any]:
    """Every :data:`CELL_COLUMNS` value of a cell, by key."""
    s = cell.stats
    row: dict[str, Any] = {
        "concurrency": cell.concurrency,
        "context_tokens": cell.context_tokens,
        "status": cell.status,
        "requests": s.requests,
        "completed": s.completed,
        "failed": s.failed,
        "concurrency_max": s.concurrency_max,
        "concurrency_mean": s.concurrency_mean,
        "duration_s": s.duration_s,
        "total_output_tokens": s.total_output_tokens,
        "output_tok_s": s.output_tok_s,
        "steady_output_tok_s": s.steady_output_tok_s,
        "steady_s": s.steady_s,
        "request_rate": s.request_rate,
        "goodput_req_s": s.goodput_req_s,
        "decode_tok_s_p50": s.decode_tok_s.p50,
        "decode_tok_s_mean": s.decode_tok_s.mean,
        "mean_acceptance_length": cell.acceptance.mean_acceptance_length,
        "draft_acceptance_rate": cell.acceptance.draft_acceptance_rate,
    }
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        dist = getattr(s, name)
        for q in ("p50", "p90", "p99", "mean"):
            row[f"{name}_{q}"] = getattr(dist, q)
    view = cell.server or {}
    for key in SERVER_KEYS:
        row[key] = view.get(key)
    return row


REQUEST_COLUMNS: tuple[Column, ...] = tuple(
    Column(key, key, 3)
    for key in (
        "concurrency", "context_tokens", "index", "t_sent", "in_flight_at_send", "ttft_s",
        "e2e_s", "tpot_s", "output_tokens", "prompt_tokens", "chunks", "itl_count",
        "finish_reason", "error",
    )
)  # fmt: skip


def request_row(cell: Cell, r: RequestRecord) -> dict[str, Any]:
    return {
        "concurrency": cell.concurrency,
        "context_tokens": cell.context_tokens,
        "index": r.index,
        "t_sent": r.t_sent,
        "in_flight_at_send": r.in_flight_at_send,
        "ttft_s": r.ttft_s,
        "e2e_s": r.e2e_s,
        "tpot_s": tpot_s(r),
        "output_tokens": r.output_tokens,
        "prompt_tokens": r.prompt_tokens,
        "chunks": len(r.chunk_times),
        "itl_count": len(itl_values(r)),
        "finish_reason": r.finish_reason,
        "error": r.error,
    }


def columns_csv(columns: tuple[Column, ...], rows: list[dict[str, Any]]) -> str:
    """A CSV of keyed rows: the header is the columns' keys, in their order."""
    return _csv(columns, rows)


def _csv(columns: tuple[Column, ...], rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[c.key for c in columns], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c.key: "" if row[c.key] is None else row[c.key] for c in columns})
    return out.getvalue()


def cells_csv(results: Results) -> str:
    return _csv(CELL_COLUMNS, [cell_row(c) for c in results.cells])


def requests_csv(results: Results) -> str:
    return _csv(REQUEST_COLUMNS, [request_row(c, r) for c in results.cells for r in c.records])
