"""The `run` command's progress lines: each with the seconds since the command started, and at the end when
the first step's answer came (what a newcomer waits for) and when the run ended."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conductor_mcp.core.events import ProgressEvent


class RunClock:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.first_answer_s: float | None = None

    def line(self, event: ProgressEvent) -> str:
        elapsed = time.monotonic() - self.started
        answered = event.kind == "step_finished" and event.step is not None and event.step.status == "done"
        if answered and self.first_answer_s is None:
            self.first_answer_s = elapsed
        total = f"/{event.total_steps}" if event.total_steps else ""
        return f"[{elapsed:5.1f}s] [{event.finished_steps}{total}] {event.message}"

    def summary(self) -> str:
        first = f"first answer after {self.first_answer_s:.1f}s, " if self.first_answer_s is not None else ""
        return f"conductor-mcp: {first}run ended after {time.monotonic() - self.started:.1f}s"
