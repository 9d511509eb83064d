"""What each door returns: the MCP result models (the tools' output schemas) and how a run becomes one.

A calling model reads these: the answer comes first, then how it was reached, then where the rest is.
"""

from __future__ import annotations

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from conductor_mcp.core.pool import CONDUCTOR_ID, Pool
from conductor_mcp.core.records import Run, RunStatus, StepRecord
from conductor_mcp.core.usage import Totals
from conductor_mcp.engine.cost import CostEstimate, spec_for
from conductor_mcp.pools import PoolSummary
from conductor_mcp.runs.render import to_markdown

MARKDOWN_LIMIT = 30_000  # characters, about 8,000 tokens


class RunResult(BaseModel):
    """A run as a calling model needs it: the answer first, then how it was reached."""

    run_id: str
    status: RunStatus = Field(description="done, running (call continue_workflow), failed, cancelled, interrupted")
    answer: str | None = Field(description="the final answer (the last step's output); partial if not done")
    error: str | None = None
    next_action: str = Field(description="what to do next, if anything")
    pool: str
    parent_run_id: str | None = None
    reasoning: str | None = Field(default=None, description="the conductor's reasoning for its workflow")
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
    """The MCP result of a run: markdown text (answer first) and the structured transcript."""
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


def plan_result(run: Run, pool: Pool, estimate: CostEstimate) -> PlanResult:
    """A planned run as the `plan` tool shows it: each step with the worker and model behind its id."""
    assert run.workflow is not None
    steps = [
        PlannedStep(
            index=i,
            worker=s.worker,
            worker_id=CONDUCTOR_ID if s.worker == CONDUCTOR_ID else pool.resolve(s.worker).id,
            model=spec_for(pool, s.worker).model,
            instruction=s.instruction,
            access=s.access,
        )
        for i, s in enumerate(run.workflow.steps)
    ]
    return PlanResult(
        run_id=run.id,
        pool=run.pool,
        reasoning=run.workflow.reasoning,
        steps=steps,
        estimated_cost=CostRange(**estimate.__dict__),
        conductor_cost_usd=run.totals.conductor_cost_usd,
        fallback_reason=run.fallback_reason,
        repairs=[f"{r.fault} -> {r.action}" for r in run.repairs],
    )


def runs_result(rows: list[dict[str, str | None]]) -> RunsResult:
    return RunsResult(
        runs=[
            RunSummary(
                run_id=str(r["id"]),
                status=str(r["status"]),
                pool=str(r["pool"]),
                task=" ".join(str(r["task"]).split())[:200],
                created_at=str(r["created_at"]),
                parent_run_id=r["parent_id"],
            )
            for r in rows
        ]
    )


def pool_info(summary: PoolSummary, pool: Pool | None) -> PoolInfo:
    """A pool as the `pools` tool shows it; `pool` is None when its file is broken."""
    if pool is None:
        return PoolInfo(
            name=summary.name, description="", conductor=None, workers=[], missing_keys=[], error=summary.error
        )
    return PoolInfo(
        name=summary.name,
        description=pool.description,
        conductor=pool.conductor.model,
        workers=[WorkerInfo(id=w.id, model=w.model, description=w.description) for w in pool.workers],
        missing_keys=pool.missing_keys(),
    )
