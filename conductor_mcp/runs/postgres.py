"""The shared run store: PostgreSQL through psycopg 3 and a connection pool, for several server replicas.

The same rows as the SQLite store (runs/sqlite.py) and the same synchronous interface (runs/store.py says why).
`update` reads the run with SELECT ... FOR UPDATE inside a transaction, so of two replicas claiming one run
the second waits for the first's commit and then sees the run taken.

Plain writes (a run's header, a step's record) commit with synchronous_commit off: the commit returns before
the WAL reaches the disk, as SQLite's WAL with synchronous=NORMAL does. A killed replica loses nothing; a crash
of the database server itself may lose the last fraction of a second of step writes, and those steps run again
on resume. That makes a write one round trip instead of one disk flush (0.2-0.3 ms against 3.6 ms on a loopback
server, tools/bench_store.py), which matters since the store is called on the event loop. A claim (`update`)
commits durably. Migrations run in one transaction under
a transaction-level advisory lock, so replicas starting together migrate one after the other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, LiteralString

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from conductor_mcp.config import masked_url
from conductor_mcp.core.records import Run, StepRecord, now
from conductor_mcp.errors import RunNotFound, StoreError
from conductor_mcp.logs import redact
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

MIGRATION_LOCK = 0x636F6E64756374  # pg_advisory_xact_lock key while migrating ("conduct")
CONNECT_TIMEOUT_S = 10

_SAVE_RUN = (
    "INSERT INTO runs (id, created_at, updated_at, status, parent_id, pool, task, principal, doc) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET "
    "updated_at = excluded.updated_at, status = excluded.status, doc = excluded.doc"
)
_SAVE_STEP = (
    "INSERT INTO steps (run_id, key, seq, status, record, messages) VALUES (%s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (run_id, key) DO UPDATE SET status = excluded.status, record = excluded.record, "
    "messages = COALESCE(excluded.messages, steps.messages)"
)


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET synchronous_commit = off")  # see the module's docstring


def check_reachable(url: str) -> None:
    """Connect once, or raise StoreError saying why (the pool alone would only report a timeout)."""
    try:
        psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg.Error as exc:
        raise StoreError(_advice(masked_url(url), exc, None)) from None


def _advice(location: str, exc: Exception, run_id: str | None) -> str:
    resume = f", then continue_workflow {run_id} resumes the run (finished steps are kept)" if run_id else ""
    text = redact(masked_url(str(exc).strip()))
    if isinstance(exc, psycopg.OperationalError | PoolTimeout):
        return (
            f"run store {location} cannot be reached ({text}): check that PostgreSQL runs and that "
            f"CONDUCTOR_DATABASE_URL names it{resume}"
        )
    return f"run store {location}: {type(exc).__name__}: {text}{resume}"


class PostgresStore(Store):
    """Runs in a PostgreSQL database that several server processes, on several hosts, share."""

    backend = "postgresql"
    MARK = "%s"
    # A row stored by an earlier version may hold `\u0000`, which jsonb (and json's ->) refuse: read it as U+FFFD.
    TOTALS_JSON = "(replace(doc, '\\u0000', '\\ufffd')::jsonb -> 'totals')::text"

    def __init__(self, url: str, max_connections: int = 8) -> None:
        self.url = url
        self.location = masked_url(url)
        check_reachable(url)
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True},
            open=False,
            name="conductor-store",
            configure=_configure,
        )
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
            self.schema_version = self._migrate()
        except BaseException:
            self._pool.close()
            raise

    def close(self) -> None:
        self._pool.close()

    @contextlib.contextmanager
    def connection(self, run_id: str | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; any database failure becomes a StoreError that says what to do."""
        try:
            with self._pool.connection(timeout=30) as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(_advice(self.location, exc, run_id)) from None

    def _migrate(self) -> int:
        with self.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
            found = (row[0] if row else None) or 0
            if found > SCHEMA_VERSION:
                raise StoreError(
                    f"run store {self.location} has schema version {found}, newer than this conductor-mcp's "
                    f"{SCHEMA_VERSION}: upgrade conductor-mcp on every replica"
                )
            for statements in MIGRATIONS[found:]:
                for statement in statements:
                    conn.execute(statement)
            if found < SCHEMA_VERSION:
                conn.execute("DELETE FROM schema_version")
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
        return SCHEMA_VERSION

    def save_run(self, run: Run) -> None:
        run.updated_at = now()
        with self.connection(run.id) as conn:
            conn.execute(_SAVE_RUN, run_row(run))

    def save_step(self, run_id: str, seq: int, record: StepRecord, messages: list[dict[str, Any]] | None) -> None:
        with self.connection(run_id) as conn:
            conn.execute(_SAVE_STEP, step_row(run_id, seq, record, messages))

    def update(self, run_id: str, change: Callable[[Run], list[int] | None]) -> Run:
        with self.connection(run_id) as conn, conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = on")  # a claim must survive a database crash
            run = self._load(conn, run_id, for_update=True)  # the row stays locked until the commit
            changed = change(run)
            if changed is not None:
                run.updated_at = now()
                conn.execute(_SAVE_RUN, run_row(run))
                for position in changed:
                    conn.execute(_SAVE_STEP, step_row(run_id, position, run.steps[position], None))
        return run

    def load_run(self, run_id: str) -> Run:
        with self.connection() as conn:
            return self._load(conn, run_id, for_update=False)

    @staticmethod
    def _load(conn: psycopg.Connection[Any], run_id: str, for_update: bool) -> Run:
        query = "SELECT doc FROM runs WHERE id = %s FOR UPDATE" if for_update else "SELECT doc FROM runs WHERE id = %s"
        row = conn.execute(query, safe_params((run_id,))).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        steps = conn.execute("SELECT record FROM steps WHERE run_id = %s ORDER BY seq", safe_params((run_id,)))
        return build_run(row[0], [r[0] for r in steps.fetchall()])

    def _rows(self, query: LiteralString, params: tuple[Any, ...]) -> list[Any]:
        with self.connection() as conn:
            return conn.execute(query, safe_params(params)).fetchall()

    def _write(self, query: LiteralString, params: tuple[Any, ...], run_id: str) -> None:
        with self.connection(run_id) as conn:
            conn.execute(query, params)

    def size_bytes(self) -> int:
        """The tables' size on disk, indexes and TOAST included."""
        with self.connection() as conn:
            row = conn.execute("SELECT pg_total_relation_size('runs') + pg_total_relation_size('steps')").fetchone()
        return int(row[0]) if row else 0

    def stats(self) -> StoreStats:
        with self.connection() as conn:
            counts = conn.execute("SELECT status, COUNT(*) FROM runs GROUP BY status ORDER BY status").fetchall()
            oldest = conn.execute("SELECT MIN(created_at) FROM runs").fetchone()
        by_status = {status: int(n) for status, n in counts}
        return StoreStats(
            self.location,
            self.size_bytes(),
            by_status,
            oldest[0] if oldest else None,
            self.backend,
            self.schema_version,
        )

    def prune(self, updated_before: str, statuses: list[str] | None, dry_run: bool) -> Pruned:
        """See Store.prune; VACUUM makes the space reusable (PostgreSQL keeps the files' size)."""
        where = "updated_at < %s AND status != 'running'"
        params: tuple[Any, ...] = (updated_before,)
        if statuses:
            where += " AND status = ANY(%s)"
            params += (list(statuses),)
        chosen = f"SELECT id FROM runs WHERE {where}"
        before = self.size_bytes()
        with self.connection() as conn:
            with conn.transaction():
                count_runs = (
                    f"SELECT COUNT(*), COALESCE(SUM(octet_length(doc) + octet_length(task)), 0) FROM runs WHERE {where}"
                )
                runs, run_bytes = conn.execute(count_runs, params).fetchone() or (0, 0)
                count_steps = (
                    "SELECT COALESCE(SUM(octet_length(record) + COALESCE(octet_length(messages), 0)), 0) "
                    f"FROM steps WHERE run_id IN ({chosen})"
                )
                step_row_ = conn.execute(count_steps, params).fetchone()
                if not dry_run and runs:
                    conn.execute(f"DELETE FROM steps WHERE run_id IN ({chosen})", params)
                    conn.execute(f"DELETE FROM runs WHERE {where}", params)
            if not dry_run and runs:
                conn.execute("VACUUM runs, steps")
        return Pruned(int(runs), int(run_bytes) + int(step_row_[0] if step_row_ else 0), before, self.size_bytes())

    def notify(self, channel: str, payload: str) -> None:
        """Send a notification to every listening replica (delivered at once: autocommit)."""
        with self.connection() as conn:
            conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))
