"""The run store's interface, shared by its two backends (runs/backends.py chooses one).

SQLite (runs/sqlite.py) is the embedded default: one file under the state directory. PostgreSQL
(runs/postgres.py) is for several server replicas sharing runs, chosen by `CONDUCTOR_DATABASE_URL`.

The interface is synchronous on purpose, for both backends. A write of one small row takes tens of microseconds
in SQLite and a fraction of a millisecond to a PostgreSQL on the same network, about the price of a hop to a
worker thread, and a synchronous write cannot be interrupted half-way by task cancellation: a finished step is
stored before anything else happens, with no shielding at each call site. It also keeps `Service.start`,
`continue_run` and `get_run` (called from every door and the CLI) plain functions.

A change that depends on what is stored (claiming a run to resume it, marking an orphan interrupted) goes
through `update`, which reads and writes in one transaction no other writer can enter, so two processes (or two
replicas) never both take the same run. Every backend failure leaves as a StoreError that says what to do.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, LiteralString

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from conductor_mcp.core.principal import LOCAL_NAME
from conductor_mcp.core.records import Run, StepRecord, now
from conductor_mcp.errors import StepNotFound

# The schema each backend migrates a store to; a store written by a newer version is refused, not guessed at.
SCHEMA_VERSION = 4
RUN_SUMMARY_KEYS: tuple[LiteralString, ...] = (
    "id",
    "created_at",
    "updated_at",
    "status",
    "parent_id",
    "pool",
    "task",
    "principal",
    "totals",
)
# Migration 2: run lists filtered by status, pool or parent, paged by (created_at, id). Each index ends in
# (created_at, id), so a page deep in the store costs what the first one does.
LIST_INDEXES: tuple[LiteralString, ...] = (
    "CREATE INDEX IF NOT EXISTS runs_by_time_id ON runs (created_at, id)",
    "CREATE INDEX IF NOT EXISTS runs_by_status_time ON runs (status, created_at, id)",
    "CREATE INDEX IF NOT EXISTS runs_by_pool_time ON runs (pool, created_at, id)",
    "CREATE INDEX IF NOT EXISTS runs_by_parent ON runs (parent_id)",
)
# Both backends' migrations: each takes a store from the version before it to its own. Version 1 is the schema
# before versions were recorded (its statements are idempotent, so a store from then adopts it as it is).
MIGRATIONS: tuple[tuple[LiteralString, ...], ...] = (
    (
        "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, "
        "status TEXT NOT NULL, parent_id TEXT, pool TEXT NOT NULL, task TEXT NOT NULL, doc TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS runs_by_time ON runs (created_at)",
        "CREATE TABLE IF NOT EXISTS steps (run_id TEXT NOT NULL REFERENCES runs (id), key TEXT NOT NULL, "
        "seq INTEGER NOT NULL, status TEXT NOT NULL, record TEXT NOT NULL, messages TEXT, PRIMARY KEY (run_id, key))",
    ),
    LIST_INDEXES,
    # Migration 3: cancellation asked for by a process that does not execute the run; its owner polls for it.
    ("CREATE TABLE IF NOT EXISTS cancels (run_id TEXT PRIMARY KEY, requested_at TEXT NOT NULL)",),
    # Migration 4: every run records its principal (core/principal.py); runs stored before then are the local
    # user's. Lists of one principal's runs are paged like the others.
    (
        f"ALTER TABLE runs ADD COLUMN principal TEXT NOT NULL DEFAULT '{LOCAL_NAME}'",
        "CREATE INDEX IF NOT EXISTS runs_by_principal_time ON runs (principal, created_at, id)",
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION


@dataclass
class StoreStats:
    """The store's size and contents, for `doctor`."""

    location: str
    size_bytes: int
    runs_by_status: dict[str, int]
    oldest: str | None
    backend: str = "sqlite"
    schema_version: int = SCHEMA_VERSION


@dataclass
class Pruned:
    """What `prune` removed (or would remove, on a dry run)."""

    runs: int
    data_bytes: int
    size_before: int
    size_after: int


@dataclass
class StoreInfo:
    """What `doctor` says about a store: which backend, where, whether it answers, at which schema version."""

    backend: str
    location: str
    stats: StoreStats | None  # None: it cannot be opened, for the reason in `problem`
    problem: str | None = None


# Text neither store can hold as it is: NUL (PostgreSQL text and jsonb refuse it, and jsonb its JSON escape
# `\u0000` too) and lone surrogates (not encodable as UTF-8). Both become U+FFFD, the same in both stores.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(text: str) -> str:
    """`text` as both stores keep it: NUL and lone surrogates replaced by U+FFFD, everything else as it was."""
    return _UNSTORABLE.sub("\ufffd", text)


def safe_params(params: tuple[Any, ...]) -> tuple[Any, ...]:
    """Query parameters (ids and filters from URLs, a run's columns) made safe: an id with a NUL in it matches
    no run (RunNotFound) instead of failing the query."""
    return tuple(safe_text(v) if isinstance(v, str) else v for v in params)


def _safe_strings(value: Any) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, list | tuple):
        return [_safe_strings(v) for v in value]
    if isinstance(value, dict):
        return {safe_text(str(k)): _safe_strings(v) for k, v in value.items()}
    return value


def safe_json(value: BaseModel | list[Any] | dict[str, Any], exclude: set[str] | None = None) -> str:
    """A model (or plain JSON data) as JSON text both stores keep and PostgreSQL can cast to jsonb. The usual dump
    is kept unless it holds `\u0000` or a lone surrogate; only then is the data walked and cleaned."""
    try:
        if isinstance(value, BaseModel):  # pydantic refuses lone surrogates itself (caught below)
            text: str | None = value.model_dump_json(exclude=exclude)
        else:
            text = json.dumps(value, ensure_ascii=False)
            text = None if _SURROGATE.search(text) else text
    except PydanticSerializationError:
        text = None
    if text is not None and "\\u0000" not in text:
        return text
    data = value.model_dump(mode="json", exclude=exclude) if isinstance(value, BaseModel) else value
    return json.dumps(_safe_strings(data), ensure_ascii=False)


def run_row(run: Run) -> tuple[Any, ...]:
    """A run's header as the `runs` row both backends store (the steps go in rows of their own)."""
    columns = (run.id, run.created_at, run.updated_at, run.status, run.parent_id, run.pool, run.task, run.principal)
    return (*safe_params(columns), safe_json(run, exclude={"steps"}))


def step_row(run_id: str, seq: int, record: StepRecord, messages: list[dict[str, Any]] | None) -> tuple[Any, ...]:
    encoded = safe_json(messages) if messages is not None else None
    return (*safe_params((run_id, record.key)), seq, record.status, safe_json(record), encoded)


def build_run(doc: str, records: list[str]) -> Run:
    run = Run.model_validate_json(doc)
    run.steps = [StepRecord.model_validate_json(r) for r in records]
    return run


class Store(ABC):
    """Persistence of runs and steps. Safe to share between tasks of one process and across processes."""

    backend: str
    location: str  # a file path or a URL without its password: what messages name
    failures: int = 0  # backend failures raised as StoreError since it opened (read by the metrics)
    MARK: ClassVar[LiteralString]  # the backend's query parameter placeholder
    TOTALS_JSON: ClassVar[LiteralString]  # its SQL for a run's totals as JSON text

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def save_run(self, run: Run) -> None:
        """Upsert the run's header (everything but its steps, which are saved one by one); sets `updated_at`."""

    @abstractmethod
    def save_step(self, run_id: str, seq: int, record: StepRecord, messages: list[dict[str, Any]] | None) -> None:
        """Upsert one step; the messages are written once and kept when a later save omits them."""

    def save_steps(self, run_id: str, steps: list[tuple[int, StepRecord]], header: Run | None = None) -> None:
        """Upsert several steps (position, record), their messages kept: a workflow's plan, stored as it starts;
        with `header` (the run `run_id`), its header first, as `save_run`. One transaction where the backend
        makes that cheaper than a write per row."""
        if header is not None:
            self.save_run(header)
        for seq, record in steps:
            self.save_step(run_id, seq, record, None)

    @abstractmethod
    def update(self, run_id: str, change: Callable[[Run], list[int] | None]) -> Run:
        """Read the run and write back what `change` did to it, in one transaction no other writer can enter.

        `change` mutates the run it is given and returns the positions of the steps it changed (the header is
        saved too), or None to write nothing. This is the compare-and-swap that claims a run for one process.
        """

    @abstractmethod
    def load_run(self, run_id: str) -> Run:
        """The run with its steps; RunNotFound when no run has that id."""

    @abstractmethod
    def _rows(self, query: LiteralString, params: tuple[Any, ...]) -> list[Any]:
        """The rows a read-only query returns, written with the backend's MARK placeholders."""

    @abstractmethod
    def _write(self, query: LiteralString, params: tuple[Any, ...], run_id: str) -> None:
        """Run one writing statement (autocommitted), written with the backend's MARK placeholders."""

    # -- replicas that lose their lease for a while (PostgreSQL; runs/fence.py) ---------------------
    def give_up(self, run_id: str) -> None:  # noqa: B027 (only a backend with replicas has anything to do)
        """Another process took the run over from this one: drop every later write of it from here."""

    def given_up(self, run_id: str) -> bool:
        """Whether this process's writes of the run are dropped (another replica's record of it stands)."""
        return False

    # -- cancellation across processes ------------------------------------------------------------
    def request_cancel(self, run_id: str) -> None:
        """Ask whichever process executes the run to cancel it (it polls `cancel_requests`)."""
        self._write(
            f"INSERT INTO cancels (run_id, requested_at) VALUES ({self.MARK}, {self.MARK}) ON CONFLICT DO NOTHING",
            (run_id, now()),
            run_id,
        )

    def cancel_requests(self) -> list[str]:
        """The runs some process has asked to cancel and whose owner has not yet dealt with it."""
        return [row[0] for row in self._rows("SELECT run_id FROM cancels", ())]

    def clear_cancel(self, run_id: str) -> None:
        """The request is dealt with (the run was cancelled, or it is being started afresh)."""
        self._write(f"DELETE FROM cancels WHERE run_id = {self.MARK}", (run_id,), run_id)

    def step_messages(self, run_id: str, key: str) -> list[dict[str, Any]] | None:
        """The exact messages a step's model received; StepNotFound when the run has no such step."""
        rows = self._rows(f"SELECT messages FROM steps WHERE run_id = {self.MARK} AND key = {self.MARK}", (run_id, key))
        if not rows:
            raise StepNotFound(run_id, key)
        return json.loads(rows[0][0]) if rows[0][0] else None

    def list_runs(
        self,
        limit: int = 20,
        status: str | None = None,
        *,
        pool: str | None = None,
        parent_id: str | None = None,
        principal: str | None = None,
        before: tuple[str, str] | None = None,
        after: tuple[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Runs newest first, as small summaries (RUN_SUMMARY_KEYS, no steps), filtered by status, pool, parent
        run and principal (an empty filter: none). Paged by keyset, not offset: `before` is the (created_at, id)
        of the last row of the previous page; `after`, of the first row of the next page (the `limit` runs just
        newer than it). See `list_query`."""
        query, params = list_query(
            self.TOTALS_JSON,
            self.MARK,
            limit,
            status=status,
            pool=pool,
            parent_id=parent_id,
            principal=principal,
            before=before,
            after=after,
        )
        rows = run_summaries(self._rows(query, params))
        return rows[::-1] if after is not None else rows

    def count_runs(self, status: str | None = None, *, pool: str | None = None, principal: str | None = None) -> int:
        """How many runs the list's filters match (the viewer's total)."""
        where, params = _filters(self.MARK, status=status, pool=pool, parent_id=None, principal=principal)
        query = "SELECT COUNT(*) FROM runs" + (f" WHERE {' AND '.join(where)}" if where else "")
        return int(self._rows(query, tuple(params))[0][0])

    @abstractmethod
    def stats(self) -> StoreStats: ...

    @abstractmethod
    def prune(self, updated_before: str, statuses: list[str] | None, dry_run: bool) -> Pruned:
        """Delete runs (and their steps) last updated before the cutoff, never a running one; give space back.

        A follow-up run keeps its own copies of the steps it inherited, so pruning a parent loses nothing of
        its children.
        """


def list_query(
    totals: LiteralString,
    mark: LiteralString,
    limit: int,
    *,
    status: str | None,
    pool: str | None,
    parent_id: str | None,
    principal: str | None,
    before: tuple[str, str] | None,
    after: tuple[str, str] | None = None,
) -> tuple[LiteralString, tuple[Any, ...]]:
    """The run-list query both backends run (see `Store.list_runs`): `totals` is the backend's expression for
    the totals JSON text, `mark` its parameter placeholder."""
    where, params = _filters(mark, status=status, pool=pool, parent_id=parent_id, principal=principal)
    cursors: tuple[tuple[tuple[str, str] | None, LiteralString], ...] = ((before, "<"), (after, ">"))
    for cursor, compare in cursors:
        if cursor is not None:
            where.append(f"(created_at, id) {compare} ({mark}, {mark})")
            params.extend(cursor)
    columns = ", ".join([*RUN_SUMMARY_KEYS[:-1], f"{totals} AS totals"])
    query = f"SELECT {columns} FROM runs" + (f" WHERE {' AND '.join(where)}" if where else "")
    order: LiteralString = "ASC" if after is not None else "DESC"  # `after`: the rows nearest above the cursor
    return query + f" ORDER BY created_at {order}, id {order} LIMIT {mark}", (*params, limit)


def _filters(mark: LiteralString, **values: str | None) -> tuple[list[LiteralString], list[Any]]:
    """The run list's equality filters (an empty one: none), as WHERE terms and their parameters."""
    columns: dict[str, LiteralString] = {
        "status": "status",
        "pool": "pool",
        "parent_id": "parent_id",
        "principal": "principal",
    }
    where: list[LiteralString] = [f"{columns[name]} = {mark}" for name, value in values.items() if value]
    return where, [value for value in values.values() if value]


def run_summaries(rows: list[Any]) -> list[dict[str, Any]]:
    """Rows of `list_query` as dicts, the totals parsed (None for a run stored before it had any)."""
    summaries: list[dict[str, Any]] = [dict(zip(RUN_SUMMARY_KEYS, row, strict=True)) for row in rows]
    for summary in summaries:
        summary["totals"] = json.loads(summary["totals"]) if summary["totals"] else None
    return summaries
