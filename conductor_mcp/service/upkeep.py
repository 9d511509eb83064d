"""What an operator asks of this installation outside any run: the store's health and retention, and the
embedded model's resident server. The CLI reaches the store and the models only through here (and the agents' check
through service/agent_check.py), as the doors reach them only through the service."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from conductor_mcp.config import Settings
from conductor_mcp.errors import PoolError
from conductor_mcp.models import local
from conductor_mcp.runs.backends import open_store, store_info
from conductor_mcp.runs.store import Pruned, StoreInfo
from conductor_mcp.service.catalogue import default_pool, load_pool


def describe_store(settings: Settings) -> StoreInfo:
    """The run store's backend, location and, when it can be opened, its schema, size and contents."""
    return store_info(settings)


def prune_runs(
    settings: Settings, older_than_days: float, statuses: list[str] | None, dry_run: bool
) -> tuple[Pruned, str]:
    """Delete runs last updated more than `older_than_days` ago (those with `statuses` only, when given); returns
    what was (or, on a dry run, would be) deleted and where the store is."""
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=older_than_days)
    store = open_store(settings)
    try:
        return store.prune(cutoff.isoformat(timespec="milliseconds"), statuses, dry_run), store.location
    finally:
        store.close()


def embedded_model_report(state_dir: Path) -> tuple[bool, str | None]:
    """Whether the embedded model can run here, and a line saying why not (or where it is)."""
    return local.doctor_report(state_dir)


def manage_embedded_model(action: str, model: str, state_dir: Path) -> str:
    """`local up | down | status`: the embedded model's resident server."""
    return local.manage(action, model, state_dir)


def embedded_servers(settings: Settings) -> local.LocalServers:
    """The embedded models' servers for one command: started (or found resident) here, handed to the service."""
    return local.LocalServers(settings.state_dir)


def prestart_embedded_models(pool_name: str | None, settings: Settings, servers: local.LocalServers) -> None:
    """Start the servers of the pool's embedded models before a run's imports, which they overlap: on a 2-core
    machine loading the model and importing the engine each take a core. A pool that does not load is left to
    the run, which says what is wrong with it."""
    directories = list(settings.pool_dirs)
    try:
        pool = load_pool(pool_name or settings.pool or default_pool(directories), directories)
    except PoolError:
        return
    for name in sorted({spec.model.removeprefix(local.PREFIX) for spec in pool.specs() if local.is_local(spec.model)}):
        servers.prestart(name)
