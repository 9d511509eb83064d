"""One principal's view of the runs: the single place where who may see, continue and cancel a run is decided.

Every door serves a request through `Reads` (the viewer under `view`) or `Access` (everything the service does)
made for the request's principal (core/principal.py): a run recorded as another principal's is RunNotFound,
exactly as a run that does not exist (a door answers 404, never 403, so run ids tell nothing), lists hold the
principal's own runs, and the runs it starts are recorded as its. An admin sees and acts on every run.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from conductor_mcp.core.events import ProgressCallback, ProgressEvent
from conductor_mcp.core.host_model import HostModel
from conductor_mcp.core.limits import CANCEL_GRACE_S
from conductor_mcp.core.principal import Principal
from conductor_mcp.core.records import Run, ToolResult
from conductor_mcp.core.request import RunRequest
from conductor_mcp.core.trace_context import TraceContext
from conductor_mcp.errors import RunNotFound
from conductor_mcp.service.reader import RunReader
from conductor_mcp.service.service import Service


class Reads:
    """What a principal may read: its own runs (an admin's: every run)."""

    def __init__(self, reader: RunReader, principal: Principal) -> None:
        self.reader = reader
        self.principal = principal

    def visible(self, run: Run) -> Run:
        """`run` if this principal may see it; RunNotFound (as for a run that does not exist) if not."""
        if not self.principal.sees(run.principal):
            raise RunNotFound(run.id)
        return run

    def get_run(self, run_id: str) -> Run:
        return self.visible(self.reader.get_run(run_id))

    def list_runs(self, limit: int = 20, status: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        """The principal's runs, newest first (an admin's: everyone's); `filters` as RunReader.list_runs."""
        mine = None if self.principal.admin else self.principal.name
        return self.reader.list_runs(limit, status, principal=mine, **filters)

    def count_runs(self, status: str | None = None, *, pool: str | None = None) -> int:
        """How many of the principal's runs (an admin's: everyone's) match the list's filters."""
        return self.reader.count_runs(
            status, pool=pool, principal=None if self.principal.admin else self.principal.name
        )

    def step_messages(self, run_id: str, key: str) -> list[dict[str, Any]] | None:
        self.get_run(run_id)
        return self.reader.step_messages(run_id, key)

    async def follow(
        self, run_id: str, heartbeat_s: float | None = None, coalesce: bool = False
    ) -> AsyncGenerator[ProgressEvent, None]:
        self.get_run(run_id)
        async for event in self.reader.follow(run_id, heartbeat_s, coalesce):
            yield event


class Access(Reads):
    """Everything a principal may do with runs through the service: start its own, and read, continue, answer
    and cancel the runs it may see."""

    def __init__(self, service: Service, principal: Principal) -> None:
        super().__init__(service, principal)
        self.service = service

    def _asked(self, request: RunRequest) -> RunRequest:
        return request.but(principal=self.principal.name)

    async def plan(self, request: RunRequest, on_event: ProgressCallback | None = None, sampling: bool = False) -> Run:
        return await self.service.plan(self._asked(request), on_event, sampling)

    def start(self, request: RunRequest, host: HostModel | None = None) -> Run:
        return self.service.start(self._asked(request), host=host)

    def continue_run(
        self, run_id: str, feedback: str | None = None, host: HostModel | None = None, trace: TraceContext | None = None
    ) -> Run:
        """As Service.continue_run; a follow-up run belongs to the principal of the run it follows."""
        self.get_run(run_id)
        return self.service.continue_run(run_id, feedback, host, trace)

    def answer_tool_calls(self, run_id: str, results: list[ToolResult]) -> Run:
        self.get_run(run_id)
        return self.service.answer_tool_calls(run_id, results)

    async def cancel(self, run_id: str, wait_s: float = CANCEL_GRACE_S) -> Run:
        self.get_run(run_id)
        return await self.service.cancel(run_id, wait_s)

    async def wait(
        self,
        run_id: str,
        timeout_s: float | None,
        on_event: ProgressCallback | None = None,
        heartbeat_s: float | None = None,
        *,
        cancel_on_exit: bool = False,
        coalesce: bool = False,
    ) -> Run:
        self.get_run(run_id)
        return await self.service.wait(
            run_id, timeout_s, on_event, heartbeat_s, cancel_on_exit=cancel_on_exit, coalesce=coalesce
        )
