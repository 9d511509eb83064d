"""The MCP door: orchestrate, plan, continue_workflow, runs and pools as tools; runs and pools as resources.

Every tool that calls models reports progress (step started / finished, with the worker) and a heartbeat
(CONDUCTOR_HEARTBEAT_S, 10 s by default) while nothing else happens, and blocks at most `wait_seconds`: past
that the run goes on in the background and the result says `status: running` with the run id to pass to
`continue_workflow`. The text content of a result is a short markdown summary (answer first); the structured
content is the transcript; resources hold the rest. A door translates: arguments become a RunRequest, runs
become results, and the error tree becomes ToolError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ToolAnnotations
from mcp_types.jsonrpc import INVALID_PARAMS
from pydantic import Field

from conductor_mcp import __version__
from conductor_mcp.core.events import ProgressEvent
from conductor_mcp.core.limits import DEFAULT_WAIT_S, MAX_RUNS_LISTED, MAX_WAIT_S
from conductor_mcp.core.records import Run, RunStatus
from conductor_mcp.core.request import (
    POOL_NAME,
    ContextText,
    FeedbackText,
    FilesArg,
    PoolName,
    RunRequest,
    StepLimit,
    TaskText,
    WorkersArg,
)
from conductor_mcp.core.trace_context import TraceContext, trace_context
from conductor_mcp.core.usage import Budget
from conductor_mcp.doors.http.principals import access
from conductor_mcp.doors.mcp.app import UI_META, apps_extension, ui_gate
from conductor_mcp.doors.mcp.results import (
    Detail,
    PlanResult,
    PoolsResult,
    RunResult,
    RunsResult,
    plan_result,
    pool_info,
    run_result,
    runs_result,
)
from conductor_mcp.doors.mcp.roots import caller_roots, context_with_files, workspace_of
from conductor_mcp.doors.mcp.sampling import host_of
from conductor_mcp.doors.mcp.stdin import bounded_stdin
from conductor_mcp.doors.mcp.tasks import TasksExtension, hand_over
from conductor_mcp.doors.render import Links, to_markdown
from conductor_mcp.errors import ConductorError, PoolError
from conductor_mcp.runtime.logs import get_logger
from conductor_mcp.service.access import Front
from conductor_mcp.service.patches import ApplyArg, WorkspaceArg, apply_final_patch, patch_summary, step_change

log = get_logger(__name__)


INSTRUCTIONS = """\
conductor-mcp solves hard tasks with a team of LLMs. A Conductor model writes a short workflow (which worker
does what, and which earlier results each one sees) and the server runs it, independent steps in parallel.
Use `orchestrate` for tasks that benefit from several strong models: tricky bugs, design decisions, proofs,
reviews, questions where a second opinion matters. Pass code or files the workers need in `context`: they see
nothing else. A call returns within `wait_seconds`; if the status is `running`, call `continue_workflow` with
the run id to collect the result. If the answer is wrong or incomplete, call `continue_workflow` with
`feedback`: the conductor reviews the earlier work with your feedback. `plan` shows the workflow and its cost
without running it. Runs are kept; read `conductor://runs/{run_id}` for the full transcript. Pools with coding
agents (see `pools`) work in copies of `workspace` (your repository; default: the first root) and never change
your tree: the result's `patch` says what they changed; pass `apply: true` to have it applied."""

WaitArg = Annotated[
    float,
    Field(
        ge=0,
        le=MAX_WAIT_S,
        description="Longest time to block, in seconds. Past it the run continues in the background and the "
        "result has status 'running': collect it with continue_workflow. Keep it below your client's timeout.",
    ),
]
RunIdArg = Annotated[str, Field(min_length=1, max_length=64, description="A run id returned by an earlier call.")]
MaxUsdArg = Annotated[float | None, Field(gt=0, description="Stop before a call that would exceed this cost.")]
MaxTokensArg = Annotated[int | None, Field(ge=1, description="Stop before a call that would exceed this.")]
DetailArg = Annotated[
    Detail,
    Field(
        description="'summary' (default): the answer, totals and a short summary per step, each step's full record "
        "a resource link away; 'full': every step's whole output too (large)."
    ),
]
SelfCorrectArg = Annotated[
    bool | None, Field(description="After the workflow, let the conductor review the team's work once and correct it.")
]


@contextmanager
def conductor_errors(kind: type[Exception] = ToolError) -> Iterator[None]:
    """The one mapping of the error tree for MCP callers: the message, raised as the error type the handler's
    protocol turns into an answer (a tool's ToolError, a resource's ResourceError, a prompt's PromptError).
    Anything outside the tree is a bug: the SDK hides its text from the client."""
    try:
        yield
    except ConductorError as exc:
        raise kind(str(exc)) from None


class PromptError(MCPError):
    """A prompt's error as the client reads it: the SDK passes an MCPError through a prompt, while any other
    exception (a ValueError included) reaches the client as "Internal server error"."""

    def __init__(self, message: str) -> None:
        super().__init__(code=INVALID_PARAMS, message=message)


class ProgressRelay:
    """Turns run events into MCP progress notifications; `progress` only grows, as the protocol requires.

    Each notification is a message on the wire (an SSE event over HTTP), so events that arrive together (a step
    finishing and the next starting, a fan-out's branches starting) come coalesced into one: see `collect`."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.count = 0

    async def __call__(self, event: ProgressEvent) -> None:
        self.count += 1
        total = f" ({event.finished_steps}/{event.total_steps} steps done)" if event.total_steps else ""
        await self.ctx.report_progress(self.count, None, f"{event.message}{total}")


class Door:
    """What every tool shares: the service, and where the viewer shows a run."""

    def __init__(self, service: Front, links: Links) -> None:
        self.service = service
        self.links = links

    async def collect(
        self, run: Run, wait_seconds: float, detail: Detail, ctx: Context, cancel_on_exit: bool, apply: bool = False
    ) -> CallToolResult:
        """A started run as the tool's result: a Tasks client's call (doors/mcp/tasks.py) hands it over at once, any
        other waits up to `wait_seconds`. `cancel_on_exit`: the caller started the run, so its going away cancels
        it. `apply`: the run's final patch is applied to the caller's tree (see service/patches.py)."""
        if not hand_over(run, detail):
            run = await access(self.service).wait(
                run.id,
                wait_seconds,
                ProgressRelay(ctx),
                self.service.settings.heartbeat_s,
                cancel_on_exit=cancel_on_exit,
                coalesce=True,
            )
        patch = None  # run_result reads it from the run: worked out once
        if apply:
            with conductor_errors():
                roots = await caller_roots(ctx, self.service)
            patch = await apply_final_patch(run, patch_summary(run), roots)
        return run_result(run, detail, self.links.run(run.id), patch)


def caller_trace(ctx: Context) -> TraceContext | None:
    """The W3C trace context the request's `_meta` carries (SEP-414), which the run's trace continues."""
    return trace_context(ctx.request_context.meta)


class WarmAfterHandshake:
    """Starts the service's warm-up of its model backends once a client's first request after `initialize` has
    been answered (tools/list, for hosts that list tools first): the handshake is answered without litellm, which
    the first run then finds loaded."""

    def __init__(self, service: Front) -> None:
        self.service = service

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.request_id is not None and ctx.method != "initialize":
            self.service.warm_up()
        return result


HEADER_ANNOTATION = "x-mcp-header"  # the schema keyword that asks for an `Mcp-Param-*` header


class ConductorServer(MCPServer):
    """MCPServer, except that the HTTP transport's check of `Mcp-Param-*` headers is skipped for a tool whose input
    schema asks for none: the SDK walks the called tool's schema (orchestrate's is large) twice on every tools/call
    to find `x-mcp-header` annotations, and without one there is nothing to compare, so the answer is the same.
    Whether a schema has one is looked up once per tool (again if the tool is replaced)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._annotated: dict[str, tuple[dict[str, Any], bool]] = {}  # tool -> (its schema, whether it asks)

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        schema = super()._tool_input_schema(name)
        if schema is None:
            return None
        known = self._annotated.get(name)
        if known is None or known[0] is not schema:
            known = self._annotated[name] = (schema, HEADER_ANNOTATION in json.dumps(schema))  # never too few
        return schema if known[1] else None


def build_server(service: Front, links: Links | None = None) -> MCPServer:
    links = links or Links()
    server = ConductorServer(
        "conductor-mcp",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        extensions=[TasksExtension(service, links), apps_extension(service, conductor_errors)],
        middleware=[ui_gate, WarmAfterHandshake(service)],
    )
    door = Door(service, links)
    _register_orchestrate(server, door)
    _register_plan_and_continue(server, door)
    _register_read_tools(server, service)
    _register_resources(server, service)
    _register_patch_resources(server, service)
    return server


async def serve_stdio(service: Front) -> None:
    """The MCP door on stdin/stdout (the host starts this process); a message over 4 MiB is dropped."""
    with bounded_stdin():
        await build_server(service).run_stdio_async()


def _register_orchestrate(server: MCPServer, door: Door) -> None:
    @server.tool(
        meta=UI_META,
        title="Orchestrate a team of LLMs",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
        description="Solve a hard task with a team of LLMs: a conductor plans a short workflow over the pool's "
        "workers and the server runs it (independent steps in parallel). Returns the answer, the run id, totals "
        "(tokens, USD, time) and a summary per step (each step's full record is a resource link away). If status is "
        "'running', call continue_workflow.",
    )
    async def orchestrate(
        task: TaskText,
        ctx: Context,
        pool: PoolName = None,
        max_steps: StepLimit = None,
        context: ContextText = None,
        files: FilesArg = None,
        wait_seconds: WaitArg = DEFAULT_WAIT_S,
        max_usd: MaxUsdArg = None,
        max_tokens: MaxTokensArg = None,
        self_correct: SelfCorrectArg = None,
        detail: DetailArg = "summary",
        workers: WorkersArg = None,
        workspace: WorkspaceArg = None,
        apply: ApplyArg = False,
    ) -> Annotated[CallToolResult, RunResult]:
        with conductor_errors():
            context, file_refs = await context_with_files(ctx, door.service, context, files)
            where = await workspace_of(ctx, door.service, workspace, pool)
            request = RunRequest.of(
                task=task,
                pool=pool,
                max_steps=max_steps,
                context=context,
                self_correct=self_correct,
                budget=Budget(max_tokens=max_tokens, max_usd=max_usd),
                files=file_refs,
                workers=workers,
                workspace=where,
                trace=caller_trace(ctx),
            )
            run = access(door.service).start(request, host=host_of(ctx))
        return await door.collect(run, wait_seconds, detail, ctx, cancel_on_exit=True, apply=apply)


def _register_plan_and_continue(server: MCPServer, door: Door) -> None:
    service = door.service

    @server.tool(
        title="Plan a workflow (no worker is called)",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True),
        description="Show the workflow the conductor would use for a task, with an estimated cost range, "
        "without running it (no worker is called). The plan is stored: continue_workflow runs it.",
    )
    async def plan(
        task: TaskText,
        ctx: Context,
        pool: PoolName = None,
        max_steps: StepLimit = None,
        context: ContextText = None,
        files: FilesArg = None,
        workers: WorkersArg = None,
        workspace: WorkspaceArg = None,
    ) -> PlanResult:
        with conductor_errors():
            context, file_refs = await context_with_files(ctx, service, context, files)
            where = await workspace_of(ctx, service, workspace, pool)
            request = RunRequest.of(
                task=task,
                pool=pool,
                max_steps=max_steps,
                context=context,
                files=file_refs,
                workers=workers,
                workspace=where,
            )
            mine = access(service)
            run = await mine.plan(request, on_event=ProgressRelay(ctx), sampling=host_of(ctx) is not None)
            return plan_result(run, mine.run_pool(run), mine.estimate(run))

    @server.tool(
        meta=UI_META,
        title="Continue, resume or correct a run",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
        description="Continue a run: collect a run still going (waits up to wait_seconds), resume an interrupted "
        "or failed one without repeating finished steps, run a stored plan, or, with feedback, start a follow-up "
        "run in which the conductor reviews the team's earlier work with your feedback and corrects it.",
    )
    async def continue_workflow(
        run_id: RunIdArg,
        ctx: Context,
        feedback: FeedbackText = None,
        wait_seconds: WaitArg = DEFAULT_WAIT_S,
        detail: DetailArg = "summary",
        apply: ApplyArg = False,
    ) -> Annotated[CallToolResult, RunResult]:
        with conductor_errors():
            mine = access(service)
            collecting = mine.executes_here(run_id)  # someone else's call started it: leaving must not cancel it
            run = mine.continue_run(run_id, feedback, host_of(ctx), caller_trace(ctx))
            resumed = run.id != run_id or (not collecting and mine.executes_here(run.id))
        return await door.collect(run, wait_seconds, detail, ctx, cancel_on_exit=resumed, apply=apply)


def _register_read_tools(server: MCPServer, service: Front) -> None:
    @server.tool(
        title="List recent runs",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        description="List recent runs, newest first, with their status.",
    )
    def runs(
        limit: Annotated[int, Field(ge=1, le=MAX_RUNS_LISTED, description="How many runs to list.")] = 10,
        status: Annotated[RunStatus | None, Field(description="Only runs in this status.")] = None,
    ) -> RunsResult:
        with conductor_errors():
            return runs_result(access(service).list_runs(limit, status))

    @server.tool(
        title="List pools of workers",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        description="List the pools of workers available, with each worker's strengths.",
    )
    def pools() -> PoolsResult:
        catalog = service.pools
        infos = [pool_info(s, None if s.error else catalog.get(s.name)) for s in catalog.summaries()]
        return PoolsResult(default_pool=catalog.default_name(), pools=infos)


def _register_resources(server: MCPServer, service: Front) -> None:
    @server.resource(
        "conductor://runs/{run_id}",
        mime_type="application/json",
        meta=UI_META,
        description="The full transcript of a run: workflow, conductor output, every step's record, totals.",
    )
    def run_resource(run_id: str) -> str:
        with conductor_errors(ResourceError):
            return access(service).get_run(run_id).model_dump_json(indent=2)

    @server.resource(
        "conductor://runs/{run_id}/steps/{index}",
        mime_type="application/json",
        description="One step of a run: its record and the exact messages its worker received.",
    )
    def step_resource(run_id: str, index: str) -> str:
        with conductor_errors(ResourceError):
            runs = access(service)
            messages = runs.step_messages(run_id, index)  # an unknown (or another's) run or step is named here
            step = next(s for s in runs.get_run(run_id).steps if s.key == index)
        return json.dumps({"record": step.model_dump(mode="json"), "messages": messages}, indent=2)

    @server.resource(
        "conductor://pools/{name}",
        mime_type="application/json",
        description="A pool's configuration. Key values are never included (only the variable names); params' "
        "text values and api_base credentials and query values are masked as ***.",
    )
    def pool_resource(name: str) -> str:
        with conductor_errors(ResourceError):
            if not re.match(POOL_NAME, name):  # a name on the search path, never a file path
                raise PoolError(f"no pool named {name!r}")
            return json.dumps(service.pools.get(name).public_view(), indent=2)

    @server.prompt(description="Review a run's transcript and decide whether to continue it with feedback.")
    def review_run(run_id: str) -> str:
        with conductor_errors(PromptError):
            run = access(service).get_run(run_id)
        return (
            f"Review this conductor-mcp run. Check the final answer against the task. If it is wrong or "
            f"incomplete, call continue_workflow with run_id '{run.id}' and feedback that says precisely what "
            f"to fix; otherwise summarise the answer.\n\nTask:\n{run.task}\n\n{to_markdown(run)}"
        )


def _register_patch_resources(server: MCPServer, service: Front) -> None:
    @server.resource(
        "conductor://runs/{run_id}/steps/{index}/diff",
        mime_type="text/x-diff",
        description="What an agent step changed in its workspace: a unified diff against the files it started "
        "from (binary files named, cut to a size).",
    )
    def diff_resource(run_id: str, index: str) -> str:
        with conductor_errors(ResourceError):
            return step_change(access(service).get_run(run_id), index, "diff")

    @server.resource(
        "conductor://runs/{run_id}/steps/{index}/patch",
        mime_type="text/x-diff",
        description="The whole change from your tree to an agent step's result (the agents it built on included), "
        "as `git apply` input, binary files too.",
    )
    def patch_resource(run_id: str, index: str) -> str:
        with conductor_errors(ResourceError):
            return step_change(access(service).get_run(run_id), index, "patch")
