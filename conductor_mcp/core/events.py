"""Progress events: what a run reports while it executes (doors turn them into MCP progress, SSE, CLI lines)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from conductor_mcp.core.records import StepRecord
from conductor_mcp.logs import get_logger

log = get_logger(__name__)

EventKind = Literal[
    "conductor_started", "conductor_finished", "step_started", "step_finished", "heartbeat", "run_finished"
]


@dataclass
class ProgressEvent:
    kind: EventKind
    run_id: str
    message: str
    step: StepRecord | None = None
    finished_steps: int = 0
    total_steps: int = 0


ProgressCallback = Callable[[ProgressEvent], Awaitable[None]]


async def emit(on_event: ProgressCallback | None, event: ProgressEvent) -> None:
    """Deliver a progress event; a failing listener never breaks the run."""
    if on_event is None:
        return
    try:
        await on_event(event)
    except Exception as exc:
        log.warning("progress_listener_failed", kind=event.kind, error=f"{type(exc).__name__}: {exc}")
