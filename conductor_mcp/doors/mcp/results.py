"""What each door returns: the MCP result models (the tools' output schemas) and how a run becomes one.

A calling model reads these: the answer comes first, then how it was reached, then where the rest is.
"""

from __future__ import annotations

import json
from typing import Literal

from mcp.types import CallToolResult, ResourceLink, TextContent
from pydantic import BaseModel, Field

from conductor_mcp.core.limits import (
    ANSWER_LIMIT_CHARS,
    INSTRUCTION_EXCERPT_CHARS,
    OUTPUT_EXCERPT_CHARS,
    RESULT_MARKDOWN_CHARS,
)
from conductor_mcp.core.outcome import BUDGETS, StopKind
from conductor_mcp.core.pool import CONDUCTOR_ID, Pool
from conductor_mcp.core.records import Run, RunStatus, StepRecord
from conductor_mcp.core.usage import CostEstimate, Totals
from conductor_mcp.doors.render import agent_warning, to_markdown
from conductor_mcp.service.catalogue import PoolSummary
from conductor_mcp.service.patches import PatchSummary, patch_summary

Detail = Literal["summary", "full"]


class StepSummary(BaseModel):
    """One step as a calling model first needs it; its full output and exact messages are at `uri`."""

    key: str = Field(description="the step's key: its index, nested as 'parent.index' for corrective workflows")
    worker: str = Field(description="the id the conductor used, with the pool's id when anonymised")
    worker_id: str
    model: str
    answered_by: str | None = None
    instruction: str
    access: list[int]
    status: str
    tokens: int
    cost_usd: float
    latency_s: float
    attempts: int
    error: str | None = None
    warning: str | None = Field(
        default=None, description="an agent step that ended well but whose work may not have happened, and why"
    )
    inherited_from: str | None = None
    messages_digest: str | None = Field(default=None, description="identifies the exact messages the worker got")
    output: str | None = Field(description="the output: whole with detail='full', else its first characters")
    output_chars: int = Field(description="the length of the whole output")
    uri: str = Field(description="the step's resource: full output and the exact messages its worker received")


class RunResult(BaseModel):
    """A run as a calling model needs it: the answer first, then what to do next, then how it was reached."""

    answer: str | None = Field(
        description="the final answer (the last step's output), partial if not done; cut past a limit, with a "
        "pointer to the rest"
    )
    answer_chars: int = Field(description="the length of the whole answer")
    status: RunStatus = Field(description="done, running (call continue_workflow), failed, cancelled, interrupted")
    stopped_by: StopKind | None = Field(
        default=None,
        description="the limit that ended the run early, keeping the best answer so far (call_cap, depth_cap, "
        "token_budget, usd_budget, server_budget), or why it did not finish (step_failed, internal_error, "
        "cancelled, interrupted); none when the workflow finished",
    )
    next_action: str = Field(description="what to do next, if anything")
    run_id: str
    error: str | None = None
    totals: Totals
    pool: str
    workers: list[str] | None = Field(
        default=None, description="the pool ids this run could use, when the caller's choice narrowed the pool"
    )
    parent_run_id: str | None = None
    reasoning: str | None = Field(default=None, description="the conductor's reasoning for its workflow")
    fallback_reason: str | None = None
    repairs: list[str] = Field(default_factory=list, description="faults in the conductor's output that were fixed")
    steps: list[StepSummary]
    transcript_uri: str
    viewer_url: str | None = Field(default=None, description="the run's page in the HTTP run viewer, when served")
    patch: PatchSummary | None = Field(
        default=None, description="the change the answer rests on, when agent workers changed files (see `uri`)"
    )


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
    workers: list[str] | None = Field(default=None, description="the pool ids the plan may use, when narrowed")
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


def _stopped_by(run: Run) -> StopKind | None:
    """The one mapping of a run's outcome for an MCP caller: which limit or fault ended it, if not the workflow."""
    return run.stop.kind if run.stop is not None and run.stop.kind != "done" else None


def _next_action(run: Run) -> str:
    if run.status == "done" and run.stop is not None and run.stop.kind in BUDGETS:
        return (
            f"The {run.stop.kind.replace('_', ' ')} stopped the run; the answer is the best so far. Raise max_tokens "
            f"or max_usd and call orchestrate again, or give feedback via continue_workflow with run_id '{run.id}'."
        )
    if run.status == "done" and run.stop is not None and run.stop.is_limit:
        return f"The {run.stop.kind.replace('_', ' ')} stopped the run; the answer is the best so far."
    actions = {
        "running": f"Call continue_workflow with run_id '{run.id}' to collect the result.",
        "interrupted": f"Call continue_workflow with run_id '{run.id}' to resume it; finished steps are kept.",
        "failed": f"Call continue_workflow with run_id '{run.id}' to retry the unfinished steps, or with feedback.",
        "cancelled": f"Call continue_workflow with run_id '{run.id}' to resume it.",
        "planned": f"Call continue_workflow with run_id '{run.id}' to run this plan.",
    }
    return actions.get(run.status, "None: the answer is final. Give feedback via continue_workflow to improve it.")


def _cut(text: str, limit: int, pointer: str) -> str:
    return text if len(text) <= limit else f"{text[:limit]}\n[... {len(text) - limit} more characters: {pointer}]"


def step_uri(run_id: str, key: str) -> str:
    return f"conductor://runs/{run_id}/steps/{key}"


def step_summary(run: Run, step: StepRecord, detail: Detail) -> StepSummary:
    full = detail == "full"
    output = step.output or ""
    return StepSummary(
        key=step.key,
        worker=step.label(),
        worker_id=step.worker_id,
        model=step.model,
        answered_by=step.answered_by,
        instruction=step.instruction if full else _cut(step.instruction, INSTRUCTION_EXCERPT_CHARS, "see uri"),
        access=step.access,
        status=step.status,
        tokens=step.prompt_tokens + step.completion_tokens,
        cost_usd=step.cost_usd,
        latency_s=step.latency_s,
        attempts=len(step.attempts),
        error=step.error,
        warning=agent_warning(step),
        inherited_from=step.inherited_from,
        messages_digest=step.messages_digest,
        output=(output if full else output[:OUTPUT_EXCERPT_CHARS]) or None,
        output_chars=len(output),
        uri=step_uri(run.id, step.key),
    )


def run_result(
    run: Run, detail: Detail = "summary", viewer_url: str | None = None, patch: PatchSummary | None = None
) -> CallToolResult:
    """The MCP result of a run. Structured content (all that some hosts show their model): the answer first, cut
    at ANSWER_LIMIT_CHARS, and a summary per step; each step is also a resource link to its full record. Text
    content: a markdown summary for hosts that show it. detail="full" puts whole outputs in, for callers that
    want everything (and asks Claude Code for room with its result-size hint). `patch`: the run's final patch
    (with the outcome of `apply`), else it is read from the run."""
    transcript = f"conductor://runs/{run.id}"
    answer = run.answer or ""
    shown = answer if detail == "full" else _cut(answer, ANSWER_LIMIT_CHARS, f"read {transcript} or detail='full'")
    result = RunResult(
        answer=shown or None,
        answer_chars=len(answer),
        status=run.status,
        stopped_by=_stopped_by(run),
        next_action=_next_action(run),
        run_id=run.id,
        error=run.error,
        totals=run.totals,
        pool=run.pool,
        workers=run.worker_ids,
        parent_run_id=run.parent_id,
        reasoning=run.workflow.reasoning if run.workflow else None,
        fallback_reason=run.fallback_reason,
        repairs=[f"{r.fault} -> {r.action}" for r in run.repairs],
        steps=[step_summary(run, step, detail) for step in run.steps],
        transcript_uri=transcript,
        viewer_url=viewer_url,
        patch=patch or patch_summary(run),
    )
    markdown = to_markdown(run, answer_limit=12_000)
    if viewer_url:
        markdown += f"\n**Viewer:** {viewer_url}\n"
    if run.status != "done" or result.stopped_by:
        markdown += f"\n**Next:** {result.next_action}\n"
    if len(markdown) > RESULT_MARKDOWN_CHARS:
        markdown = markdown[:RESULT_MARKDOWN_CHARS] + f"\n\n… cut; the full transcript is at {transcript}\n"
    links = [
        ResourceLink(
            type="resource_link",
            uri=step_uri(run.id, s.key),
            name=f"step {s.key}",
            mime_type="application/json",
            description=f"step {s.key} ({s.label()}): full output and the exact messages it received",
        )
        for s in run.steps
    ]
    if result.patch is not None:
        links.insert(0, _patch_link(result.patch))
        if result.patch.applied != "not asked":
            markdown += f"\n**Apply:** {_applied(result.patch)}\n"
    structured = result.model_dump(mode="json")
    meta = {"anthropic/maxResultSizeChars": min(500_000, 2 * len(json.dumps(structured)))} if detail == "full" else None
    answer_first = CallToolResult(
        content=[TextContent(type="text", text=markdown), *links], structured_content=structured
    )
    answer_first.meta = meta  # a field whose wire name is `_meta`
    return answer_first


def _patch_link(patch: PatchSummary) -> ResourceLink:
    return ResourceLink(
        type="resource_link",
        uri=patch.uri,
        name=f"patch of step {patch.step}",
        mime_type="text/x-diff",
        description=f"the final patch: {_patch_line(patch)}",
    )


def _patch_line(patch: PatchSummary) -> str:
    return f"{patch.files_changed} files changed, +{patch.lines_added} -{patch.lines_removed} lines"


def _applied(patch: PatchSummary) -> str:
    return "applied to your tree" if patch.applied == "applied" else f"not applied: {patch.apply_error}"


def plan_result(run: Run, pool: Pool, estimate: CostEstimate) -> PlanResult:
    """A planned run as the `plan` tool shows it: each step with the worker and model behind its id."""
    assert run.workflow is not None
    steps = [
        PlannedStep(
            index=i,
            worker=s.worker,
            worker_id=CONDUCTOR_ID if s.worker == CONDUCTOR_ID else pool.resolve(s.worker).id,
            model=pool.spec_of(s.worker).model,
            instruction=s.instruction,
            access=s.access,
        )
        for i, s in enumerate(run.workflow.steps)
    ]
    return PlanResult(
        run_id=run.id,
        pool=run.pool,
        workers=run.worker_ids,
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
        missing_keys=summary.missing_keys,
    )
