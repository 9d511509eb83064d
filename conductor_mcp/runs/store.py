"""Runs on disk: SQLite in WAL mode, one row per run and one per step, each step committed as it ends.

The standard library's sqlite3 is used synchronously on purpose: a WAL commit of one small row takes tens of
microseconds, far less than a thread hop to an async wrapper, and a synchronous write cannot be interrupted
half-way by task cancellation, so a finished step is on disk before anything else happens. WAL with
synchronous=NORMAL survives a killed process (only a power loss can drop the last commits), and the busy
timeout lets several server processes share one state directory.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from conductor_mcp.core.records import Run, StepRecord, now
from conductor_mcp.errors import RunNotFound
from conductor_mcp.runs.private import private_dir, private_file

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    status TEXT NOT NULL,
    parent_id TEXT,
    pool TEXT NOT NULL,
    task TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (created_at);
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT NOT NULL REFERENCES runs (id),
    key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    status TEXT NOT NULL,
    record TEXT NOT NULL,
    messages TEXT,
    PRIMARY KEY (run_id, key)
);
"""


class Store:
    """Persistence of runs and steps. Safe to share between tasks of one process and across processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        private_dir(path.parent)
        private_file(path)  # SQLite gives its -wal and -shm files the database file's mode
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        for companion in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if companion.exists():  # made by an older version, or before the database file was private
                private_file(companion)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        with self._lock:
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        with self._lock:
            self._db.execute(sql, params)

    def save_run(self, run: Run) -> None:
        """Upsert the run's header (everything but its steps, which are saved one by one)."""
        run.updated_at = now()
        doc = run.model_dump_json(exclude={"steps"})
        self._write(
            "INSERT INTO runs (id, created_at, updated_at, status, parent_id, pool, task, doc) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
            "updated_at = excluded.updated_at, status = excluded.status, doc = excluded.doc",
            (run.id, run.created_at, run.updated_at, run.status, run.parent_id, run.pool, run.task, doc),
        )

    def save_step(self, run_id: str, seq: int, record: StepRecord, messages: list[dict[str, Any]] | None) -> None:
        """Upsert one step; the messages are written once and kept when a later save omits them."""
        self._write(
            "INSERT INTO steps (run_id, key, seq, status, record, messages) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id, key) DO UPDATE SET status = excluded.status, record = excluded.record, "
            "messages = COALESCE(excluded.messages, steps.messages)",
            (
                run_id,
                record.key,
                seq,
                record.status,
                record.model_dump_json(),
                json.dumps(messages) if messages is not None else None,
            ),
        )

    def load_run(self, run_id: str) -> Run:
        with self._lock:
            row = self._db.execute("SELECT doc FROM runs WHERE id = ?", (run_id,)).fetchone()
            steps = self._db.execute("SELECT record FROM steps WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()
        if row is None:
            raise RunNotFound(run_id)
        run = Run.model_validate_json(row[0])
        run.steps = [StepRecord.model_validate_json(r[0]) for r in steps]
        return run

    def step_messages(self, run_id: str, key: str) -> list[dict[str, Any]] | None:
        with self._lock:
            row = self._db.execute("SELECT messages FROM steps WHERE run_id = ? AND key = ?", (run_id, key)).fetchone()
        if row is None:
            raise LookupError(f"run {run_id!r} has no step {key!r}")
        return json.loads(row[0]) if row[0] else None

    def list_runs(self, limit: int = 20, status: str | None = None) -> list[dict[str, Any]]:
        """Recent runs, newest first, as small summaries (no steps)."""
        query = "SELECT id, created_at, updated_at, status, parent_id, pool, task FROM runs"
        params: tuple[Any, ...] = ()
        if status:
            query += " WHERE status = ?"
            params = (status,)
        query += " ORDER BY created_at DESC LIMIT ?"
        with self._lock:
            rows = self._db.execute(query, (*params, limit)).fetchall()
        keys = ("id", "created_at", "updated_at", "status", "parent_id", "pool", "task")
        return [dict(zip(keys, row, strict=True)) for row in rows]
