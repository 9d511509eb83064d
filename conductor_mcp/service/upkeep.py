"""What an operator asks of this installation outside any run: the store's health and retention, the embedded
model's resident server, and a round trip of each configured agent. The CLI reaches the store, the models and the
agents only through here, as the doors reach them only through the service."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from conductor_mcp.agents import doctor
from conductor_mcp.config import Settings
from conductor_mcp.models import local
from conductor_mcp.runs.backends import open_store, store_info
from conductor_mcp.runs.store import Pruned, StoreInfo


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


async def check_agents(settings: Settings, say: Callable[[str], None]) -> int:
    """Start each agent the pools configure once in its sandbox (`doctor`); how many failed, each said."""
    return await doctor.check_agents(settings, say)
