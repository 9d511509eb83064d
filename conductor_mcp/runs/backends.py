"""Which backend holds the runs, and what comes with it: PostgreSQL when CONDUCTOR_DATABASE_URL is set (with
advisory-lock leases and progress across replicas), else SQLite under the state directory (with file-lock
leases). The PostgreSQL modules are imported only when chosen: psycopg is needed only then."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from conductor_mcp.config import Settings, masked_url
from conductor_mcp.errors import ConductorError, StoreError
from conductor_mcp.runs.leases import FileLease, FileLiveness, Lease, Liveness
from conductor_mcp.runs.store import Store, StoreInfo
from conductor_mcp.runtime.lifetimes import TaskOwner

if TYPE_CHECKING:
    from conductor_mcp.runs.postgres_live import ProgressBus


def open_store(settings: Settings) -> Store:
    """The store the settings name: PostgreSQL when CONDUCTOR_DATABASE_URL is set, else SQLite in the state dir."""
    if settings.database_url:
        try:
            from conductor_mcp.runs.postgres import PostgresStore
        except ImportError as exc:
            raise StoreError(
                f"CONDUCTOR_DATABASE_URL is set but {exc.name} is not installed: pip install 'conductor-mcp[postgres]'"
            ) from None
        return PostgresStore(settings.database_url)
    from conductor_mcp.runs.sqlite import SqliteStore

    return SqliteStore(settings.db_path)


def store_info(settings: Settings) -> StoreInfo:
    """Open the configured store and describe it; a store that cannot be opened is described, not raised."""
    backend = "postgresql" if settings.database_url else "sqlite"
    location = masked_url(settings.database_url) if settings.database_url else str(settings.db_path)
    try:
        store = open_store(settings)
        try:
            stats = store.stats()
        finally:
            store.close()
    except ConductorError as exc:
        return StoreInfo(backend, location, None, str(exc))
    return StoreInfo(backend, location, stats)


def open_lease(state_dir: Path, store: Store) -> Lease:
    """The lease that fits the store: an advisory lock beside a PostgreSQL store, else a file lock."""
    if store.backend == "postgresql":
        from conductor_mcp.runs.postgres import PostgresStore
        from conductor_mcp.runs.postgres_live import AdvisoryLease

        assert isinstance(store, PostgresStore)
        return AdvisoryLease(store)
    return FileLease(state_dir)


def open_liveness(state_dir: Path, store: Store) -> Liveness:
    """How to tell whether a run's owner lives, without holding a lease: for readers (show, runs, view)."""
    if store.backend == "postgresql":
        from conductor_mcp.runs.postgres import PostgresStore
        from conductor_mcp.runs.postgres_live import AdvisoryLiveness

        assert isinstance(store, PostgresStore)
        return AdvisoryLiveness(store)
    return FileLiveness(state_dir)


def open_progress_bus(store: Store, owner: TaskOwner) -> ProgressBus | None:
    """Progress of runs executing on other replicas: with PostgreSQL only (an SQLite store has one host)."""
    if store.backend != "postgresql":
        return None
    from conductor_mcp.runs.postgres import PostgresStore
    from conductor_mcp.runs.postgres_live import ProgressBus

    assert isinstance(store, PostgresStore)
    return ProgressBus(store, owner)
