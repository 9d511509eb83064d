"""One place where a service's metrics and traces learn what its runs do: an observer of each run's events.

`Telemetry.watch(run)` is what the relay of a run's execution (runs/active.py) shows each event to. Each event is
looked at (with the run and step records it concerns) before it goes on to the run's followers, so a client that
hears a run finish can read it in the metrics at once. What the observer does per event is a few counter updates (and,
with traces on, a span started or ended); a failure in it is logged, never raised into the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from conductor_mcp.config import Settings
from conductor_mcp.core.events import ProgressEvent
from conductor_mcp.core.records import Run
from conductor_mcp.runtime.logs import get_logger
from conductor_mcp.telemetry.metrics import Metrics, Replicas, StoreHealth

if TYPE_CHECKING:
    from conductor_mcp.telemetry.traces import RunTrace, Tracing

log = get_logger(__name__)


class TracedStore(StoreHealth, Protocol):
    """What telemetry reads of the run store: its health for the metrics, and a step's messages for its span."""

    def step_messages(self, run_id: str, key: str) -> list[dict[str, Any]] | None: ...


class Telemetry:
    """The service's metrics (always) and traces (when OTEL_EXPORTER_OTLP_ENDPOINT is set); `close` flushes
    the traces still buffered. Made and closed by the service's lifespan."""

    def __init__(self, settings: Settings, store: TracedStore, liveness: Replicas) -> None:
        self.metrics = Metrics(store, liveness)
        self.tracing: Tracing | None = None
        if settings.otlp_endpoint or settings.otlp_traces_endpoint:
            from conductor_mcp.telemetry.traces import open_tracing

            self.tracing = open_tracing(settings, store.step_messages)

    def watch(self, run: Run) -> Callable[[ProgressEvent], None]:
        """What looks at every event of this execution of `run`, before its followers hear of it."""
        watch = RunWatch(self, run)

        def observe(event: ProgressEvent) -> None:
            try:
                watch.saw(event)
            except Exception as exc:  # telemetry must never cost a run its progress or its result
                log.warning("telemetry_failed", run_id=run.id, kind=event.kind, error=f"{type(exc).__name__}: {exc}")

        return observe

    def close(self) -> None:
        """Send the spans still buffered and stop the exporter (blocking: call it off the event loop)."""
        if self.tracing is not None:
            self.tracing.shutdown()


class RunWatch:
    """What one execution of a run has shown so far: when it and each running step started, and its trace."""

    def __init__(self, telemetry: Telemetry, run: Run) -> None:
        self.run = run
        self.metrics = telemetry.metrics
        self.started = time.monotonic()
        self.steps: dict[str, float] = {}  # key of a running step -> when it started
        self.trace: RunTrace | None = telemetry.tracing.start(run) if telemetry.tracing else None
        self.metrics.run_started(run)

    def saw(self, event: ProgressEvent) -> None:
        handler = _HANDLERS.get(event.kind)
        if handler is not None:
            handler(self, event)
        if self.trace is not None:
            self.trace.saw(self.run, event)

    def _planned(self, event: ProgressEvent) -> None:
        self.metrics.planned(self.run)

    def _step_started(self, event: ProgressEvent) -> None:
        if event.step is not None:
            self.steps[event.step.key] = time.monotonic()

    def _step_finished(self, event: ProgressEvent) -> None:
        if event.step is not None:
            started = self.steps.pop(event.step.key, None)
            self.metrics.step_ended(self.run, event.step, None if started is None else time.monotonic() - started)

    def _finished(self, event: ProgressEvent) -> None:
        ended = time.monotonic()
        for step in self.run.steps:  # steps cut short with their run (cancelled, interrupted) said nothing more
            if step.key in self.steps:
                self.metrics.step_ended(self.run, step, ended - self.steps.pop(step.key))
        self.metrics.run_finished(self.run, ended - self.started)


# By kind of event, the RunWatch method that looks at it: kept on the class, not as bound methods on each watch,
# which made every watch a cycle holding its run's records until a full collection (the hold's RSS grew with it).
_HANDLERS: dict[str, Callable[[RunWatch, ProgressEvent], None]] = {
    "conductor_finished": RunWatch._planned,
    "step_started": RunWatch._step_started,
    "step_finished": RunWatch._step_finished,
    "run_finished": RunWatch._finished,
}
