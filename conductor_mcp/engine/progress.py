"""Delivering progress events to whoever listens, without letting a listener break the run."""

from __future__ import annotations

from conductor_mcp.core.events import ProgressCallback, ProgressEvent
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)


async def emit(on_event: ProgressCallback | None, event: ProgressEvent) -> None:
    """Deliver a progress event; a failing listener is logged, never raised into the run."""
    if on_event is None:
        return
    try:
        await on_event(event)
    except Exception as exc:
        log.warning("progress_listener_failed", kind=event.kind, error=f"{type(exc).__name__}: {exc}")
