"""MCP Tasks (SEP-2663, the `io.modelcontextprotocol/tasks` extension): a run is a task.

A client that declares the extension on a 2026-07-28-era request gets `orchestrate` and `continue_workflow`
answered at once with a task (`resultType: "task"`) instead of a blocking call; it
polls `tasks/get` for the status and, once the run has finished, the same CallToolResult the tool returns;
`tasks/cancel` cancels the run (its finished steps are kept). Every other client gets the tools as they are
(`wait_seconds`, then `continue_workflow`). The tools' own code runs in both cases: in task mode a tool starts
its run and hands it over (`hand_over`) instead of waiting for it.

The task id is a handle that carries all a `tasks/*` request needs beside the stored run: the run id, and the
detail the call asked for when it is not the default (`<run id>.full`). Nothing lives in one process's memory,
so any replica on the same store answers for a task another one started (the 2026-07-28 era is stateless).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, RequestParams
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from mcp_types.methods import serialize_server_result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from conductor_mcp.core.records import Run, RunStatus
from conductor_mcp.doors.http.principals import access
from conductor_mcp.doors.mcp.results import Detail, run_result
from conductor_mcp.doors.render import Links
from conductor_mcp.errors import ConductorError, RunNotFound
from conductor_mcp.service.access import Front

TASKS = "io.modelcontextprotocol/tasks"
TASK_TOOLS = frozenset({"orchestrate", "continue_workflow"})

# Run status -> task status. A failed run is a tool result (the tool returns it, as any run), so its task is
# `completed` with that result: the SEP keeps `failed` for JSON-RPC errors. An interrupted run (its server
# stopped) is the one case where the call itself failed.
TASK_STATUS: dict[RunStatus, str] = {
    "planned": "completed",
    "running": "working",
    "done": "completed",
    "failed": "completed",
    "cancelled": "cancelled",
    "interrupted": "failed",
}

TaskId = Annotated[str, Field(alias="taskId", min_length=1, max_length=64, description="a task id, as a task named it")]
DETAIL_MARK = "."  # run ids are hex: the first dot in a task id starts the detail its call asked for


def task_id(run_id: str, detail: Detail) -> str:
    """The handle of a run served as a task: the run id, with the detail its result is given in unless default."""
    return run_id if detail == "summary" else f"{run_id}{DETAIL_MARK}{detail}"


def task_run(task: str) -> tuple[str, Detail]:
    """A task id's run id and detail; RunNotFound for a handle no server minted."""
    run_id, mark, detail = task.partition(DETAIL_MARK)
    if not mark:
        return run_id, "summary"
    if detail == "full":
        return run_id, "full"
    raise RunNotFound(task)


class TaskParams(RequestParams):
    """`tasks/get` and `tasks/cancel` params."""

    task_id: TaskId


class UpdateTaskParams(RequestParams):
    """`tasks/update` params: answers to a task's `inputRequests` (a run never asks for any)."""

    task_id: TaskId
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


@dataclass
class Handover:
    """What a tool in task mode hands the interceptor: the run it started and the detail asked for."""

    run: Run | None = None
    detail: Detail = "summary"


_handover: ContextVar[Handover | None] = ContextVar("conductor_task_handover", default=None)


def hand_over(run: Run, detail: Detail) -> bool:
    """In a task-mode call, give the started run to the interceptor and return True (the tool does not wait)."""
    handover = _handover.get()
    if handover is None:
        return False
    handover.run, handover.detail = run, detail
    return True


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request may get a task: a 2026-07-28-era request that declares the extension (the SEP
    defines it for no earlier protocol version)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and TASKS in (capabilities.extensions or {})


@contextmanager
def task_errors() -> Iterator[None]:
    """The error tree as a tasks/* caller reads it: a JSON-RPC invalid-params error with the message."""
    try:
        yield
    except RunNotFound as exc:
        raise MCPError(code=INVALID_PARAMS, message=f"taskId: no task {exc.run_id!r} on this server") from None
    except ConductorError as exc:
        raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None


class TasksExtension(Extension):
    """Serves `orchestrate` and `continue_workflow` as tasks to clients that declare the extension."""

    identifier = TASKS

    def __init__(self, service: Front, links: Links | None = None) -> None:
        self.service = service
        self.links = links or Links()

    def methods(self) -> list[MethodBinding]:
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskParams, self.get, modern),
            MethodBinding("tasks/update", UpdateTaskParams, self.update, modern),
            MethodBinding("tasks/cancel", TaskParams, self.cancel, modern),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Run the tool in task mode; a run still going becomes a CreateTaskResult, anything else (an error,
        a run already finished) is the tool's own result."""
        if params.name not in TASK_TOOLS or not declared(ctx):
            return await call_next(ctx)
        handover = Handover()
        token = _handover.set(handover)
        try:
            result = await call_next(ctx)
        finally:
            _handover.reset(token)
        run = handover.run
        if run is None or run.status != "running":
            return result
        return {"resultType": "task", **self.task(run, handover.detail)}  # stored: tasks/get resolves it already

    def task(self, run: Run, detail: Detail) -> dict[str, Any]:
        """The SEP's Task for a run: status, a message, times; runs are kept, so the ttl is unlimited."""
        finished = sum(1 for s in run.steps if s.status == "done")
        message = f"{run.status}: {finished}/{len(run.steps)} steps done" + (f"; {run.error}" if run.error else "")
        return {
            "taskId": task_id(run.id, detail),
            "status": TASK_STATUS[run.status],
            "statusMessage": message,
            "createdAt": run.created_at,
            "lastUpdatedAt": run.updated_at,
            "ttlMs": None,
            "pollIntervalMs": self.service.settings.task_poll_ms,
        }

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        """`tasks/get`: the task's state and, when it has finished, the result the tool would have returned."""
        with task_errors():
            run_id, detail = task_run(params.task_id)
            run = access(self.service).get_run(run_id)
        task = {"resultType": "complete", **self.task(run, detail)}
        if task["status"] == "completed":
            result = run_result(run, detail, self.links.run(run.id))
            wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            task["result"] = serialize_server_result("tools/call", ctx.protocol_version, wire)
        elif task["status"] == "failed":
            task["error"] = {
                "code": INTERNAL_ERROR,
                "message": f"run {run.id} was interrupted ({run.error}): call continue_workflow with this run_id "
                "to resume it without repeating its finished steps",
                "data": {"runId": run.id, "runStatus": run.status},
            }
        return task

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        """`tasks/update`: acknowledged; a run never asks for input, so every response is one to ignore."""
        with task_errors():
            access(self.service).get_run(task_run(params.task_id)[0])
        return {}

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        """`tasks/cancel`: cancel the run wherever it executes (its finished steps are kept), then acknowledge.

        SEP-2663: the ack is empty, an unknown task id is an error, and cancellation is eventually consistent: a
        run executing in another process is asked through the store and this does not wait for it; a task that has
        already ended is acknowledged and stays as it ended."""
        with task_errors():
            await access(self.service).cancel(task_run(params.task_id)[0], wait_s=0)
        return {}
