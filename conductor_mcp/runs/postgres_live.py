"""What replicas sharing a PostgreSQL store know of each other while they live: leases and progress.

- AdvisoryLease: each replica takes a session-level advisory lock on a connection of its own and never
  releases it; its runs record the lock's key in their token. When the replica dies, however it dies, its
  connection closes, PostgreSQL frees the lock, and every replica reads its `running` runs as interrupted.
  A replica whose lease session ends while it lives (the database restarted, a network cut, an administrator
  ended it) can no longer show that it owns its runs: it holds back every write (runs/fence.py), reconnects with
  backoff, takes the same lock again, keeps the runs still recorded as its own and gives up only those another
  replica claimed meanwhile (runs/reclaim.py), then writes again. It never exits for it.
- ProgressBus: a replica executing a run sends each progress event with NOTIFY; a replica whose client waits
  for that run LISTENs on one connection and hands the events to its waiters. The waiter reloads the run from
  the store when it finishes (or when the owner's lease is gone: a dead replica sends nothing more).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import select
import threading
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import psycopg

from conductor_mcp.core.events import ProgressEvent, heartbeat_event
from conductor_mcp.core.limits import CONNECT_TIMEOUT_S, LIVE_MESSAGE_CHARS, OWNER_CHECK_S, RETAKE_GRACE_S
from conductor_mcp.core.records import Run
from conductor_mcp.errors import StoreError
from conductor_mcp.runs.leases import Lease, Liveness
from conductor_mcp.runs.postgres import PostgresStore, check_reachable
from conductor_mcp.runtime.lifetimes import TaskOwner
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)

CHANNEL = "conductor_progress"
RETAKE_BACKOFF_S = (0.1, 1.0)  # the first and the longest wait between attempts to take a lost lease again
_HELD = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND classid::bigint = %s AND objid::bigint = %s)"
)
_LIVE = (  # every replica's lease: a bigint advisory lock (objsubid 1) held in this database
    "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


class AdvisoryLiveness(Liveness):
    """Whether a replica still holds its advisory lock, read from pg_locks."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    def is_alive(self, token: str | None) -> bool:
        if token is None:
            return False
        try:
            key = int(token.rsplit("-", 1)[-1], 16) if token.startswith("pg-") else None
        except ValueError:
            key = None
        if key is None:
            return False  # not a replica's token (a run moved from an SQLite store): nobody executes it
        row = self.store.read(lambda conn: conn.execute(_HELD, (key >> 32, key & 0xFFFFFFFF)).fetchone())
        return bool(row and row[0])

    def live_count(self) -> int:
        with self.store.connection() as conn:
            row = conn.execute(_LIVE).fetchone()
        return int(row[0]) if row else 0


class AdvisoryLease(AdvisoryLiveness, Lease):
    """This replica's lease: `pg_advisory_lock(key)` held on a dedicated connection until the process ends, and
    taken again whenever that connection's session ends while the process lives."""

    def __init__(self, store: PostgresStore) -> None:
        super().__init__(store)
        self.key = secrets.randbits(62) + 1
        self.token = f"pg-{os.getpid()}-{self.key:x}"
        store.fence.token = self.token
        check_reachable(store.url)
        self._conn = self._connect()
        self._conn.execute("SELECT pg_advisory_lock(%s)", (self.key,))
        self._closed = False
        self._regained: Callable[[], None] | None = None
        threading.Thread(target=self._watch, name="lease-watch", daemon=True).start()

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            self.store.url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name=f"conductor-mcp lease {os.getpid()}",
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )

    def when_regained(self, hook: Callable[[], None]) -> None:
        self._regained = hook

    def close(self) -> None:
        self._closed = True
        self._conn.close()  # the session ends and the lock with it

    def _watch(self) -> None:
        """For as long as the process lives: wait for the lease's session to end, then take the lease again."""
        while not self._closed:
            error = self._session_ended()
            if self._closed:
                return
            self.store.fence.lost()  # from now on nothing is written until the lease is ours again
            log.error("lease_lost", token=self.token, error=error)
            self._retake()

    def _session_ended(self) -> str:
        """Block until the lease's session ends (the server went away, or ended it); what it said."""
        fd = self._conn.fileno()
        while not self._closed:
            try:
                readable, _, _ = select.select([fd], [], [], 5.0)
                if readable and not self._closed:  # an idle session hears from the server only when it ends
                    self._conn.execute("SELECT 1")  # a notice would pass here; a closed session raises
            except (psycopg.Error, OSError, ValueError) as exc:
                return str(exc).strip()
        return "closed"

    def _retake(self) -> None:
        """Connect and take the same lock again, with backoff, until it is ours; then reclaim the runs."""
        delay, locked = RETAKE_BACKOFF_S[0], False
        while not self._closed:
            try:
                locked = locked or self._try_lock()
                if locked:
                    self.store.fence.retaken()  # no one can take our runs now; claims may go on
                    if self._regained is not None:
                        self._regained()
                    self.store.fence.reclaimed()
                    log.warning("lease_retaken", token=self.token)
                    return
            except (psycopg.Error, OSError, StoreError) as exc:
                log.warning("lease_not_retaken", token=self.token, error=str(exc).strip(), retry_s=delay)
                if locked and (self._conn.broken or self._conn.closed):
                    locked = False  # the database went away again, and the lock with the session
                    self.store.fence.lost()
            time.sleep(delay)
            delay = min(delay * 2, RETAKE_BACKOFF_S[1])

    def _try_lock(self) -> bool:
        """One attempt; False while the old session still holds the lock (the server has not seen it end)."""
        conn = self._connect()
        try:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        except BaseException:
            conn.close()
            raise
        if not (row and row[0]) or self._closed:
            conn.close()
            return False
        old, self._conn = self._conn, conn
        with contextlib.suppress(psycopg.Error, OSError):
            old.close()
        return True

    def is_alive(self, token: str | None) -> bool:
        return token == self.token or super().is_alive(token)


def _encode(event: ProgressEvent) -> str:
    """The event without its step record (waiters show the message and counts; the record is in the store)."""
    fields = (event.kind, event.run_id, event.message[:LIVE_MESSAGE_CHARS], event.finished_steps, event.total_steps)
    return json.dumps(fields)


def _decode(payload: str) -> ProgressEvent:
    kind, run_id, message, finished, total = json.loads(payload)
    return ProgressEvent(kind, run_id, message, None, finished, total)


async def _settled(load: Callable[[], Run]) -> Run:
    """The run; if it reads as interrupted, read once more after RETAKE_GRACE_S: after a database restart every
    owner has lost its lease for a moment, and one that takes it again (runs/fence.py) goes on with its run."""
    run = load()
    if run.status != "interrupted":
        return run
    await asyncio.sleep(RETAKE_GRACE_S)
    return load()


class ProgressBus:
    """Progress events across replicas: NOTIFY out for runs executing here, LISTEN in for runs elsewhere."""

    def __init__(self, store: PostgresStore, owner: TaskOwner) -> None:
        self.store = store
        self._owner = owner  # the service's: the listener ends with it
        self._waiters: dict[str, list[asyncio.Queue[ProgressEvent]]] = defaultdict(list)
        self._listener: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None

    def publish(self, event: ProgressEvent) -> None:
        """Send an event of a run executing here; a failure is logged, never breaks the run."""
        try:
            self.store.notify(CHANNEL, _encode(event))
        except StoreError as exc:
            log.warning("progress_not_published", run_id=event.run_id, error=str(exc))

    async def _listen(self, ready: asyncio.Future[None]) -> None:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.store.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="conductor-mcp"
            )
            async with conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                ready.set_result(None)
                async for note in conn.notifies():
                    event = _decode(note.payload)
                    for queue in self._waiters.get(event.run_id, ()):
                        queue.put_nowait(event)
        except psycopg.Error as exc:
            log.error("progress_listener_stopped", error=str(exc))  # waiters fall back to checking the store
            if not ready.done():
                ready.set_exception(StoreError(f"run store {self.store.location}: cannot LISTEN: {exc}"))
        finally:
            self._listener = None

    async def _ensure_listening(self) -> None:
        if self._listener is None:
            self._ready = asyncio.get_running_loop().create_future()
            self._listener = self._owner.spawn(self._listen(self._ready), name="progress-bus")
        assert self._ready is not None
        await asyncio.shield(self._ready)

    @contextlib.asynccontextmanager
    async def subscribe(self, run_id: str) -> AsyncIterator[asyncio.Queue[ProgressEvent]]:
        """A queue of the run's events from now on (listening before the caller reads the run: nothing missed)."""
        await self._ensure_listening()
        queue: asyncio.Queue[ProgressEvent] = asyncio.Queue()
        self._waiters[run_id].append(queue)
        try:
            yield queue
        finally:
            self._waiters[run_id].remove(queue)
            if not self._waiters[run_id]:
                del self._waiters[run_id]

    async def events(
        self, run_id: str, load: Callable[[], Run], heartbeat_s: float | None
    ) -> AsyncGenerator[ProgressEvent, None]:
        """The events of a run executing on another replica until it stops running (and a heartbeat after
        `heartbeat_s` without one). `load` reads the run: one whose owner died reads as interrupted, which is
        checked every OWNER_CHECK_S, since a dead replica sends nothing more."""
        loop = asyncio.get_running_loop()
        async with self.subscribe(run_id) as queue:
            run = await _settled(load)
            quiet_since = loop.time()
            while run.status == "running":
                try:
                    event = await asyncio.wait_for(queue.get(), OWNER_CHECK_S)
                except TimeoutError:
                    run = await _settled(load)
                    if heartbeat_s is not None and run.status == "running" and loop.time() - quiet_since >= heartbeat_s:
                        yield heartbeat_event(run)
                        quiet_since = loop.time()
                    continue
                yield event
                quiet_since = loop.time()
                if event.kind == "run_finished":
                    run = load()

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
