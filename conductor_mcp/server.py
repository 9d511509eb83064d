"""The MCP server: orchestrate, plan, continue_workflow, runs and pools as tools; runs and pools as resources.

Every tool that calls models reports progress (step started / finished, with the worker) and a heartbeat at
least every 15 s, and blocks at most `wait_seconds`: past that the run goes on in the background and the
result says `status: running` with the run id to pass to `continue_workflow`. The text content of a result is
a short markdown summary (answer first); the structured content is the transcript; resources hold the rest.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from conductor_mcp import __version__
from conductor_mcp.config import MAX_CONTEXT_CHARS, MAX_STEPS_LIMIT, MAX_TASK_CHARS
from conductor_mcp.executor import ProgressEvent, estimate_cost
from conductor_mcp.logs import get_logger
from conductor_mcp.pool import PoolError
from conductor_mcp.service import RequestError, RunNotFound, Service
from conductor_mcp.transcript import Budget, Run, RunStatus, StepRecord, Totals, to_markdown

log = get_logger(__name__)

HEARTBEAT_S = 10.0
DEFAULT_WAIT_S = 45.0  # below the ~60 s at which Claude Desktop and older Codex versions cut a tool call
MAX_WAIT_S = 3600.0
MARKDOWN_LIMIT = 30_000  # characters, about 8,000 tokens

INSTRUCTIONS = """\
conductor-mcp solves hard tasks with a team of LLMs. A Conductor model writes a short workflow (which worker
does what, and which earlier results each one sees) and the server runs it, independent steps in parallel.
Use `orchestrate` for tasks that benefit from several strong models: tricky bugs, design decisions, proofs,
reviews, questions where a second opinion matters. Pass code or files the workers need in `context`: they see
nothing else. A call returns within `wait_seconds`; if the status is `running`, call `continue_workflow` with
the run id to collect the result. If the answer is wrong or incomplete, call `continue_workflow` with
`feedback`: the conductor reviews the earlier work with your feedback. `plan` shows the workflow and its cost
without running it. Runs are kept; read `conductor://runs/{run_id}` for the full transcript."""


# ----------------------------------------------------------------------------------------------- results


class RunResult(BaseModel):
    """A run as a calling model needs it: the answer first, then how it was reached."""

    run_id: str
    status: RunStatus = Field(description="done, running (call continue_workflow), failed, cancelled, interrupted")
    answer: str | None = Field(description="the final answer (the last step's output); partial if not done")
    error: str | None = None
    next_action: str = Field(description="what to do next, if anything")
    pool: str
    parent_run_id: str | None = None
    reasoning: str | None = Field(None, description="the conductor's reasoning for its workflow")
    fallback_reason: str | None = None
    repairs: list[str] = Field(default_factory=list, description="faults in the conductor's output that were fixed")
    totals: Totals
    steps: list[StepRecord]
    transcript_uri: str


class PlannedStep(BaseModel):
    index: int
    worker: str = Field(description="the id the conductor used")
    worker_id: str
    model: str
    instruction: str
    access: list[int]


class CostRange(BaseModel):
    low_usd: float
    high_usd: float
    assumption: str
    unpriced_workers: list[str]


class PlanResult(BaseModel):
    run_id: str = Field(description="pass to continue_workflow to run this plan")
    pool: str
    reasoning: str
    steps: list[PlannedStep]
    estimated_cost: CostRange
    conductor_cost_usd: float
    fallback_reason: str | None = None
    repairs: list[str] = Field(default_factory=list)


class RunSummary(BaseModel):
    run_id: str
    status: str
    pool: str
    task: str
    created_at: str
    parent_run_id: str | None = None


class RunsResult(BaseModel):
    runs: list[RunSummary]


class WorkerInfo(BaseModel):
    id: str
    model: str
    description: str


class PoolInfo(BaseModel):
    name: str
    description: str
    conductor: str | None
    workers: list[WorkerInfo]
    missing_keys: list[str] = Field(description="environment variables this pool needs that are not set")
    error: str | None = None


class PoolsResult(BaseModel):
    default_pool: str
    pools: list[PoolInfo]


def _next_action(run: Run) -> str:
    actions = {
        "running": f"Call continue_workflow with run_id '{run.id}' to collect the result.",
        "interrupted": f"Call continue_workflow with run_id '{run.id}' to resume it; finished steps are kept.",
        "failed": f"Call continue_workflow with run_id '{run.id}' to retry the unfinished steps, or with feedback.",
        "cancelled": f"Call continue_workflow with run_id '{run.id}' to resume it.",
        "planned": f"Call continue_workflow with run_id '{run.id}' to run this plan.",
    }
    return actions.get(run.status, "None: the answer is final. Give feedback via continue_workflow to improve it.")


def run_result(run: Run) -> CallToolResult:
    result = RunResult(
        run_id=run.id,
        status=run.status,
        answer=run.answer,
        error=run.error,
        next_action=_next_action(run),
        pool=run.pool,
        parent_run_id=run.parent_id,
        reasoning=run.workflow.reasoning if run.workflow else None,
        fallback_reason=run.fallback_reason,
        repairs=[f"{r.fault} -> {r.action}" for r in run.repairs],
        totals=run.totals,
        steps=run.steps,
        transcript_uri=f"conductor://runs/{run.id}",
    )
    markdown = to_markdown(run, answer_limit=12_000)
    if run.status != "done":
        markdown += f"\n**Next:** {result.next_action}\n"
    if len(markdown) > MARKDOWN_LIMIT:
        markdown = markdown[:MARKDOWN_LIMIT] + f"\n\n… cut; the full transcript is at {result.transcript_uri}\n"
    return CallToolResult(
        content=[TextContent(type="text", text=markdown)], structured_content=result.model_dump(mode="json")
    )


# ---------------------------------------------------------------------------------------------- progress


class ProgressRelay:
    """Turns run events into MCP progress notifications; `progress` only grows, as the protocol requires."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.count = 0

    async def __call__(self, event: ProgressEvent) -> None:
        self.count += 1
        total = f" ({event.finished_steps}/{event.total_steps} steps done)" if event.total_steps else ""
        await self.ctx.report_progress(self.count, None, f"{event.message}{total}")


# ------------------------------------------------------------------------------------------------ server

TaskArg = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_TASK_CHARS,
        description="The task, stated completely: workers see only this, `context`, and the steps they are shown.",
    ),
]
POOL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_\-]*$"  # names on the pool search path only: never a file path
PoolArg = Annotated[
    str | None,
    Field(
        pattern=POOL_NAME,
        max_length=100,
        description="Pool of workers to use (see the `pools` tool). Default: the server's default.",
    ),
]
MaxStepsArg = Annotated[
    int | None,
    Field(ge=1, le=MAX_STEPS_LIMIT, description="Most steps the conductor may use. Default: the pool's limit."),
]
ContextArg = Annotated[
    str | None,
    Field(
        max_length=MAX_CONTEXT_CHARS,
        description="Code, files, logs or facts the workers need, as text. Every worker sees it.",
    ),
]
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


def build_server(service: Service) -> MCPServer:
    server = MCPServer("conductor-mcp", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    def run_or_error(run_id: str) -> Run:
        try:
            return service.status(run_id)
        except RunNotFound as exc:
            raise ToolError(f"run_id: {exc}") from None

    @server.tool(
        description="Solve a hard task with a team of LLMs: a conductor plans a short workflow over the pool's "
        "workers and the server runs it (independent steps in parallel). Returns the answer, the run id, totals "
        "(tokens, USD, time) and a per-step transcript. If status is 'running', call continue_workflow."
    )
    async def orchestrate(
        task: TaskArg,
        ctx: Context,
        pool: PoolArg = None,
        max_steps: MaxStepsArg = None,
        context: ContextArg = None,
        wait_seconds: WaitArg = DEFAULT_WAIT_S,
        max_usd: Annotated[
            float | None, Field(gt=0, description="Stop before a call that would exceed this cost.")
        ] = None,
        max_tokens: Annotated[int | None, Field(ge=1, description="Stop before a call that would exceed this.")] = None,
        self_correct: Annotated[
            bool | None,
            Field(description="After the workflow, let the conductor review the team's work once and correct it."),
        ] = None,
    ) -> Annotated[CallToolResult, RunResult]:
        try:
            budget = Budget(max_tokens=max_tokens, max_usd=max_usd)
            run = service.start(task, pool, max_steps, context, None, budget, self_correct=self_correct)
        except RequestError as exc:
            raise ToolError(str(exc)) from None
        run = await service.wait(run.id, wait_seconds, ProgressRelay(ctx), HEARTBEAT_S)
        return run_result(run)

    @server.tool(
        description="Show the workflow the conductor would use for a task, with an estimated cost range, "
        "without running it (no worker is called). The plan is stored: continue_workflow runs it."
    )
    async def plan(
        task: TaskArg, ctx: Context, pool: PoolArg = None, max_steps: MaxStepsArg = None, context: ContextArg = None
    ) -> PlanResult:
        try:
            run = await service.plan(task, pool, max_steps, context, on_event=ProgressRelay(ctx))
        except RequestError as exc:
            raise ToolError(str(exc)) from None
        pool_ = service.pool(run.pool)
        assert run.workflow is not None
        estimate = estimate_cost(run.workflow, pool_, run.task, run.context)
        return PlanResult(
            run_id=run.id,
            pool=run.pool,
            reasoning=run.workflow.reasoning,
            steps=[
                PlannedStep(
                    index=i,
                    worker=s.worker,
                    worker_id=pool_.worker(s.worker).id,
                    model=pool_.worker(s.worker).model,
                    instruction=s.instruction,
                    access=s.access,
                )
                for i, s in enumerate(run.workflow.steps)
            ],
            estimated_cost=CostRange(**estimate.__dict__),
            conductor_cost_usd=run.totals.conductor_cost_usd,
            fallback_reason=run.fallback_reason,
            repairs=[f"{r.fault} -> {r.action}" for r in run.repairs],
        )

    @server.tool(
        description="Continue a run: collect a run still going (waits up to wait_seconds), resume an interrupted "
        "or failed one without repeating finished steps, run a stored plan, or, with feedback, start a follow-up "
        "run in which the conductor reviews the team's earlier work with your feedback and corrects it."
    )
    async def continue_workflow(
        run_id: RunIdArg,
        ctx: Context,
        feedback: Annotated[
            str | None,
            Field(
                max_length=MAX_TASK_CHARS,
                description="What was wrong or missing; starts a follow-up run in which the conductor sees the "
                "earlier steps and this feedback (workers see the feedback too).",
            ),
        ] = None,
        wait_seconds: WaitArg = DEFAULT_WAIT_S,
    ) -> Annotated[CallToolResult, RunResult]:
        run_or_error(run_id)
        try:
            run = service.continue_run(run_id, feedback)
        except RequestError as exc:
            raise ToolError(str(exc)) from None
        run = await service.wait(run.id, wait_seconds, ProgressRelay(ctx), HEARTBEAT_S)
        return run_result(run)

    @server.tool(description="List recent runs, newest first, with their status.")
    def runs(
        limit: Annotated[int, Field(ge=1, le=100, description="How many runs to list.")] = 10,
        status: Annotated[
            Literal["planned", "running", "done", "failed", "interrupted", "cancelled"] | None,
            Field(description="Only runs in this status."),
        ] = None,
    ) -> RunsResult:
        rows = service.list_runs(limit, status)
        return RunsResult(
            runs=[
                RunSummary(
                    run_id=r["id"],
                    status=r["status"],
                    pool=r["pool"],
                    task=" ".join(r["task"].split())[:200],
                    created_at=r["created_at"],
                    parent_run_id=r["parent_id"],
                )
                for r in rows
            ]
        )

    @server.tool(description="List the pools of workers available, with each worker's strengths.")
    def pools() -> PoolsResult:
        return PoolsResult(
            default_pool=service.default_pool_name(), pools=[_pool_info(service, s) for s in service.pools()]
        )

    @server.resource(
        "conductor://runs/{run_id}",
        mime_type="application/json",
        description="The full transcript of a run: workflow, conductor output, every step's record, totals.",
    )
    def run_resource(run_id: str) -> str:
        try:
            return service.status(run_id).model_dump_json(indent=2)
        except RunNotFound as exc:
            raise ResourceError(str(exc)) from None

    @server.resource(
        "conductor://runs/{run_id}/steps/{index}",
        mime_type="application/json",
        description="One step of a run: its record and the exact messages its worker received.",
    )
    def step_resource(run_id: str, index: str) -> str:
        try:
            run = service.status(run_id)
            step = next(s for s in run.steps if s.key == index)
            messages = service.store.step_messages(run_id, index)
        except (RunNotFound, LookupError, StopIteration):
            raise ResourceError(f"run {run_id!r} has no step {index!r}") from None
        return json.dumps({"record": step.model_dump(mode="json"), "messages": messages}, indent=2)

    @server.resource(
        "conductor://pools/{name}",
        mime_type="application/json",
        description="A pool's configuration (key values are never included, only the variable names).",
    )
    def pool_resource(name: str) -> str:
        if not re.match(POOL_NAME, name):
            raise ResourceError(f"no pool named {name!r}")
        try:
            return service.pool(name).model_dump_json(indent=2)
        except PoolError as exc:
            raise ResourceError(str(exc)) from None

    @server.prompt(description="Review a run's transcript and decide whether to continue it with feedback.")
    def review_run(run_id: str) -> str:
        try:
            run = service.status(run_id)
        except RunNotFound as exc:
            raise ValueError(str(exc)) from None
        return (
            f"Review this conductor-mcp run. Check the final answer against the task. If it is wrong or "
            f"incomplete, call continue_workflow with run_id '{run.id}' and feedback that says precisely what "
            f"to fix; otherwise summarise the answer.\n\nTask:\n{run.task}\n\n{to_markdown(run)}"
        )

    return server


def _pool_info(service: Service, summary: Any) -> PoolInfo:
    if summary.error:
        return PoolInfo(
            name=summary.name, description="", conductor=None, workers=[], missing_keys=[], error=summary.error
        )
    pool = service.pool(summary.name)
    return PoolInfo(
        name=summary.name,
        description=pool.description,
        conductor=pool.conductor.model,
        workers=[WorkerInfo(id=w.id, model=w.model, description=w.description) for w in pool.workers],
        missing_keys=pool.missing_keys(),
    )


# --------------------------------------------------------------------------------------------- transports

LOOPBACK_NAMES = {"localhost"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BearerTokenMiddleware:
    """Refuses HTTP requests without `Authorization: Bearer <token>` (compared in constant time)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            supplied = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(supplied, self.expected):
                body = json.dumps({"error": "missing or wrong bearer token"}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, host: str, token: str | None, allowed_hosts: list[str]) -> Any:
    """The streamable HTTP app with DNS-rebinding protection and, when a token is set, bearer auth."""
    if not is_loopback(host) and not token:
        raise RequestError(
            f"host: binding to {host!r} exposes the server beyond this machine; set CONDUCTOR_HTTP_TOKEN"
        )
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", *(f"{h}:*" if ":" not in h else h for h in allowed_hosts)]
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):
        hosts.append(f"{host}:*")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts],
    )
    app = server.streamable_http_app(transport_security=security, host=host)
    return BearerTokenMiddleware(app, token) if token else app


async def serve_stdio(service: Service) -> None:
    try:
        await build_server(service).run_stdio_async()
    finally:
        await service.close()


async def serve_http(service: Service, host: str, port: int, token: str | None, allowed_hosts: list[str]) -> None:
    import uvicorn

    app = http_app(build_server(service), host, token, allowed_hosts)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", access_log=False)
    log.info("http_listening", url=f"http://{host}:{port}/mcp", auth="bearer" if token else "none")
    try:
        await uvicorn.Server(config).serve()
    finally:
        await service.close()
