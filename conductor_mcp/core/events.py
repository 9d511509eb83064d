"""Progress events: what a run reports while it executes (doors turn them into MCP progress, SSE, CLI lines)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from conductor_mcp.core.records import Run, StepRecord

EventKind = Literal[
    "conductor_started",
    "conductor_finished",
    "step_started",
    "step_finished",
    "heartbeat",
    "changed",  # a run followed through the store (executing in another process) changed there
    "run_finished",
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


def heartbeat_event(run: Run) -> ProgressEvent:
    """Said when nothing else has happened for a while: a client's idle timer restarts on it."""
    finished = sum(1 for s in run.steps if s.status == "done")
    message = f"still running: {finished}/{len(run.steps)} steps done"
    return ProgressEvent("heartbeat", run.id, message, None, finished, len(run.steps))


def changed_event(run: Run) -> ProgressEvent:
    finished = sum(1 for s in run.steps if s.status == "done")
    return ProgressEvent("changed", run.id, f"run {run.status}", None, finished, len(run.steps))
