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

A database that goes away for a while (a restart, a failover, a session an administrator ended) is waited out:
a pooled connection is checked before use, and a call that loses its connection is tried again on a fresh one,
with backoff, for up to STORE_RETRY_S. Every write is an upsert or a delete, so doing it twice is harmless; a
claim (`update`) is tried again only when its connection broke before the commit was sent (if the commit itself
was cut, whether it landed is unknown, and the caller hears so). While the replica's lease is lost its writes
wait (runs/fence.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, LiteralString, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from conductor_mcp.config import masked_url
from conductor_mcp.core.limits import ATTEMPT_WAIT_S, CONNECT_TIMEOUT_S, STORE_RETRY_S
from conductor_mcp.core.records import Run, StepRecord, now
from conductor_mcp.errors import RunNotFound, StoreError
from conductor_mcp.runs.fence import WriteFence
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
from conductor_mcp.runtime.logs import get_logger, redact

log = get_logger(__name__)
T = TypeVar("T")

MIGRATION_LOCK = 0x636F6E64756374  # pg_advisory_xact_lock key while migrating ("conduct")

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


def connection_lost(exc: Exception) -> bool:
    """Whether a failure is the connection's (the server went away, is starting, or ended the session), not the
    statement's: only those are worth trying again on a fresh connection."""
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith(("08", "57P"))  # connection exceptions, shutdowns, starting up


class _CommitCut(Exception):
    """The connection broke while a claim's commit was on its way: it may or may not have landed."""


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
        self.fence = WriteFence()  # the lease moves it (runs/postgres_live.py)
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True},
            open=False,
            name="conductor-store",
            configure=_configure,
            check=ConnectionPool.check_connection,  # a connection the database ended is replaced, not used
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
        """A pooled connection, one attempt; any database failure becomes a StoreError that says what to do."""
        try:
            with self._pool.connection(timeout=30) as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as exc:
            self.failures += 1
            raise StoreError(_advice(self.location, exc, run_id)) from None

    def read(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """`work` on a pooled connection, tried again while the database is away (see the module's docstring)."""
        return self._attempts(work, None, lambda _: True)

    def _claiming(self, work: Callable[[psycopg.Connection[Any]], T], run_id: str) -> T:
        return self._attempts(work, run_id, self.fence.wait_for_claims)

    def _writing(self, work: Callable[[psycopg.Connection[Any]], None], run_id: str) -> None:
        """A plain write of a run: it waits while the lease is lost, and is dropped if another replica took the
        run over meanwhile (its record stands, runs/fence.py)."""

        def unless_given_up(conn: psycopg.Connection[Any]) -> None:
            if not self.fence.given_up(run_id):  # checked once the fence lets the write through
                work(conn)

        self._attempts(unless_given_up, run_id, self.fence.wait_for_writes)

    def _attempts(
        self,
        work: Callable[[psycopg.Connection[Any]], T],
        run_id: str | None,
        ready: Callable[[float], bool],
    ) -> T:
        deadline, delay = time.monotonic() + STORE_RETRY_S, 0.05
        while True:
            if not ready(max(0.0, deadline - time.monotonic())):
                raise StoreError(
                    f"run store {self.location}: this replica lost its lease on the database and has not taken it "
                    f"again within {STORE_RETRY_S:.0f}s; nothing was written"
                )
            try:
                with self._pool.connection(timeout=ATTEMPT_WAIT_S) as conn:
                    return work(conn)
            except _CommitCut as exc:
                raise StoreError(_advice(self.location, exc, run_id)) from None
            except (psycopg.Error, PoolTimeout) as exc:
                if not connection_lost(exc) or time.monotonic() + delay > deadline:
                    raise StoreError(_advice(self.location, exc, run_id)) from None
                text = redact(masked_url(str(exc).strip()))
                log.warning("store_connection_lost", run_id=run_id, error=text, retry_s=delay)
            time.sleep(delay)  # the store is synchronous (runs/store.py): a restart holds the caller this long
            delay = min(delay * 2, 1.0)

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
        row = run_row(run)
        self._writing(lambda conn: _execute(conn, _SAVE_RUN, row), run.id)

    def save_step(self, run_id: str, seq: int, record: StepRecord, messages: list[dict[str, Any]] | None) -> None:
        row = step_row(run_id, seq, record, messages)
        self._writing(lambda conn: _execute(conn, _SAVE_STEP, row), run_id)

    def update(self, run_id: str, change: Callable[[Run], list[int] | None]) -> Run:
        def claim(conn: psycopg.Connection[Any]) -> tuple[Run, bool]:
            committing = False
            try:
                with conn.transaction():
                    conn.execute("SET LOCAL synchronous_commit = on")  # a claim must survive a database crash
                    run = self._load(conn, run_id, for_update=True)  # the row stays locked until the commit
                    changed = change(run)
                    if changed is not None:
                        run.updated_at = now()
                        conn.execute(_SAVE_RUN, run_row(run))
                        for position in changed:
                            conn.execute(_SAVE_STEP, step_row(run_id, position, run.steps[position], None))
                    committing = True
            except psycopg.OperationalError as exc:
                if committing:
                    raise _CommitCut(f"the connection broke while committing: {exc}") from None
                raise
            return run, changed is not None

        run, changed = self._claiming(claim, run_id)
        if changed:
            self.fence.owned_again(run_id, run.owner)
        return run

    def give_up(self, run_id: str) -> None:
        self.fence.give_up(run_id)

    def given_up(self, run_id: str) -> bool:
        return self.fence.given_up(run_id)

    def load_run(self, run_id: str) -> Run:
        return self.read(lambda conn: self._load(conn, run_id, for_update=False))

    @staticmethod
    def _load(conn: psycopg.Connection[Any], run_id: str, for_update: bool) -> Run:
        query = "SELECT doc FROM runs WHERE id = %s FOR UPDATE" if for_update else "SELECT doc FROM runs WHERE id = %s"
        row = conn.execute(query, safe_params((run_id,))).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        steps = conn.execute("SELECT record FROM steps WHERE run_id = %s ORDER BY seq", safe_params((run_id,)))
        return build_run(row[0], [r[0] for r in steps.fetchall()])

    def _rows(self, query: LiteralString, params: tuple[Any, ...]) -> list[Any]:
        safe = safe_params(params)
        return self.read(lambda conn: conn.execute(query, safe).fetchall())

    def _write(self, query: LiteralString, params: tuple[Any, ...], run_id: str) -> None:
        """A cancellation request or its clearing: no record of the run, so neither held back nor dropped (a run
        given up here is cancelled through its new owner)."""
        self._attempts(lambda conn: _execute(conn, query, params), run_id, lambda _: True)

    def size_bytes(self) -> int:
        """The tables' size on disk, indexes and TOAST included."""
        rows = self._rows("SELECT pg_total_relation_size('runs') + pg_total_relation_size('steps')", ())
        return int(rows[0][0]) if rows else 0

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
        """Send a notification to every listening replica (delivered at once: autocommit). Best effort, one
        attempt, and none while the lease is lost: an event is not worth holding a run up for."""
        if self.fence.state != "held":
            return
        try:
            with self._pool.connection(timeout=ATTEMPT_WAIT_S) as conn:
                conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(_advice(self.location, exc, None)) from None


def _execute(conn: psycopg.Connection[Any], query: LiteralString, params: tuple[Any, ...]) -> None:
    conn.execute(query, params)
