"""The embedded run store: SQLite in WAL mode, one row per run and one per step, each step committed as it ends.

The standard library's sqlite3, used synchronously (see runs/store.py for why). WAL with
synchronous=NORMAL survives a killed process (only a power loss can drop the last commits), and the busy
timeout lets several server processes share one state directory.

Every SQLite failure leaves here as a StoreError that names the file and what to do (a full disk, a corrupt
file, a read-only directory), never as a raw traceback. A change that depends on what is stored (claiming a run
to resume it, marking an orphan interrupted) reads and writes in one `BEGIN IMMEDIATE` transaction (`update`),
so two processes never both take the same run.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, LiteralString

from conductor_mcp.core.records import Run, StepRecord, now
from conductor_mcp.errors import RunNotFound, StoreError
from conductor_mcp.runs.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Pruned,
    Store,
    StoreStats,
    build_run,
    run_row,
    safe_params,
    step_row,
)
from conductor_mcp.runtime.private import private_dir, private_file


def _advice(path: Path, exc: sqlite3.Error, run_id: str | None) -> str:
    """What went wrong with the store file, in words, and what the user can do about it."""
    name = getattr(exc, "sqlite_errorname", "")
    resume = f", then continue_workflow {run_id} resumes the run (finished steps are kept)" if run_id else ""
    if name == "SQLITE_FULL":
        return f"run store {path}: {exc}: free disk space{resume}"
    if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or type(exc) is sqlite3.DatabaseError:
        return (
            f"run store {path} is corrupt ({exc}): move it aside (mv {path} {path}.corrupt, with any -wal and "
            "-shm files beside it); a new, empty store is created at the next start and nothing else is lost"
        )
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")):
        return (
            f"run store {path} cannot be written ({exc}): check the permissions of the file and its directory{resume}"
        )
    return f"run store {path}: {exc}{resume}"


_SAVE_RUN = (
    "INSERT INTO runs (id, created_at, updated_at, status, parent_id, pool, task, principal, doc) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
    "updated_at = excluded.updated_at, status = excluded.status, doc = excluded.doc"
)
SAVE_STEP = (  # public: tools/bench_engine.py times it bare, as SQLite's floor under a step's writes
    "INSERT INTO steps (run_id, key, seq, status, record, messages) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (run_id, key) DO UPDATE SET status = excluded.status, record = excluded.record, "
    "messages = COALESCE(excluded.messages, steps.messages)"
)


class SqliteStore(Store):
    """The embedded store: one SQLite file, shared safely by the tasks of one process and by several processes."""

    backend = "sqlite"
    MARK = "?"
    TOTALS_JSON = "json_extract(doc, '$.totals')"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = str(path)
        private_dir(path.parent)
        private_file(path)  # SQLite gives its -wal and -shm files the database file's mode
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(_advice(path, exc, None)) from None
        try:
            with self._guard():
                self._db.execute("PRAGMA journal_mode=WAL")
                for companion in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                    if companion.exists():  # made by an older version, or before the database file was private
                        private_file(companion)
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute("PRAGMA busy_timeout=30000")
                self.schema_version = self._migrate()
                self._db.execute("SELECT COUNT(*) FROM runs").fetchone()  # a corrupt file fails here, not later
        except StoreError:
            self._db.close()
            raise

    def _migrate(self) -> int:
        """Bring the file to SCHEMA_VERSION in one transaction (another process may be doing the same)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = self._db.execute("SELECT MAX(version) FROM schema_version").fetchone()
            found = row[0] or 0
            if found > SCHEMA_VERSION:
                raise StoreError(
                    f"run store {self.path} has schema version {found}, newer than this conductor-mcp's "
                    f"{SCHEMA_VERSION}: upgrade conductor-mcp, or point CONDUCTOR_STATE_DIR elsewhere"
                )
            for statements in MIGRATIONS[found:]:
                for statement in statements:
                    self._db.execute(statement)
            if found < SCHEMA_VERSION:
                self._db.execute("DELETE FROM schema_version")
                self._db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        return SCHEMA_VERSION

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _guard(self, run_id: str | None = None) -> Iterator[None]:
        """Hold the connection; turn any SQLite failure into a StoreError that says what to do."""
        with self._lock:
            try:
                yield
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):  # a closed connection cannot even say whether it is in one
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                self.failures += 1
                raise StoreError(_advice(self.path, exc, run_id)) from None

    def _write(self, query: LiteralString, params: tuple[Any, ...], run_id: str) -> None:
        with self._guard(run_id):
            self._db.execute(query, params)

    def save_run(self, run: Run) -> None:
        run.updated_at = now()
        self._write(_SAVE_RUN, run_row(run), run.id)

    def save_step(self, run_id: str, seq: int, record: StepRecord, messages: list[dict[str, Any]] | None) -> None:
        self._write(SAVE_STEP, step_row(run_id, seq, record, messages), run_id)

    def save_steps(self, run_id: str, steps: list[tuple[int, StepRecord]], header: Run | None = None) -> None:
        """One transaction for them all and the header: a commit per row was a third of a step's store writes."""
        if not steps and header is None:
            return
        rows = [step_row(run_id, seq, record, None) for seq, record in steps]
        with self._guard(run_id):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if header is not None:
                    header.updated_at = now()
                    self._db.execute(_SAVE_RUN, run_row(header))
                self._db.executemany(SAVE_STEP, rows)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def update(self, run_id: str, change: Callable[[Run], list[int] | None]) -> Run:
        with self._guard(run_id):
            self._db.execute("BEGIN IMMEDIATE")  # the write lock first: no other writer between read and write
            try:
                run = self._load(run_id)
                changed = change(run)
                if changed is not None:
                    run.updated_at = now()
                    self._db.execute(_SAVE_RUN, run_row(run))
                    for position in changed:
                        self._db.execute(SAVE_STEP, step_row(run_id, position, run.steps[position], None))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        return run

    def load_run(self, run_id: str) -> Run:
        with self._guard():
            return self._load(run_id)

    def _load(self, run_id: str) -> Run:
        key = safe_params((run_id,))
        row = self._db.execute("SELECT doc FROM runs WHERE id = ?", key).fetchone()
        steps = self._db.execute("SELECT record FROM steps WHERE run_id = ? ORDER BY seq", key).fetchall()
        if row is None:
            raise RunNotFound(run_id)
        return build_run(row[0], [r[0] for r in steps])

    def _rows(self, query: LiteralString, params: tuple[Any, ...]) -> list[Any]:
        with self._guard():
            return self._db.execute(query, safe_params(params)).fetchall()

    def file_bytes(self) -> int:
        """The store's size on disk: the database and its write-ahead log."""
        files = (self.path, self.path.with_name(self.path.name + "-wal"))
        return sum(f.stat().st_size for f in files if f.exists())

    def stats(self) -> StoreStats:
        with self._guard():
            counts = self._db.execute("SELECT status, COUNT(*) FROM runs GROUP BY status ORDER BY status").fetchall()
            oldest = self._db.execute("SELECT MIN(created_at) FROM runs").fetchone()[0]
        return StoreStats(str(self.path), self.file_bytes(), dict(counts), oldest, self.backend, self.schema_version)

    def prune(self, updated_before: str, statuses: list[str] | None, dry_run: bool) -> Pruned:
        """See Store.prune; the file shrinks by VACUUM."""
        where = "updated_at < ? AND status != 'running'"
        params: tuple[Any, ...] = (updated_before,)
        if statuses:
            where += f" AND status IN ({', '.join('?' for _ in statuses)})"
            params += tuple(statuses)
        chosen = f"SELECT id FROM runs WHERE {where}"
        before = self.file_bytes()
        with self._guard():
            runs, run_bytes = self._db.execute(
                f"SELECT COUNT(*), COALESCE(SUM(LENGTH(doc) + LENGTH(task)), 0) FROM runs WHERE {where}", params
            ).fetchone()
            step_bytes = self._db.execute(
                "SELECT COALESCE(SUM(LENGTH(record) + COALESCE(LENGTH(messages), 0)), 0) FROM steps "
                f"WHERE run_id IN ({chosen})",
                params,
            ).fetchone()[0]
            if not dry_run and runs:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute(f"DELETE FROM steps WHERE run_id IN ({chosen})", params)
                self._db.execute(f"DELETE FROM runs WHERE {where}", params)
                self._db.execute("COMMIT")
                self._db.execute("VACUUM")  # give the space back to the file system
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return Pruned(runs, run_bytes + step_bytes, before, self.file_bytes())
